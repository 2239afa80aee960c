package workload

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/events"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

func query(name string) string {
	body, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("workload: missing embedded query %s: %v", name, err))
	}
	return string(body)
}

var (
	sqlTenantInsert          = query("tenant_insert")
	sqlCategoryInsert        = query("category_insert")
	sqlCustomerInsert        = query("customer_insert")
	sqlTxScope               = query("tx_scope")
	sqlTxTenant              = query("tx_tenant")
	sqlProductInsert         = query("product_insert")
	sqlProductSetPrice       = query("product_set_price")
	sqlProductSetDescription = query("product_set_description")
	sqlProductDiscontinue    = query("product_discontinue")
	sqlProductDelete         = query("product_delete")
	sqlOrderPlace            = query("order_place")
	sqlOrderConfirm          = query("order_confirm")
	sqlOrderShip             = query("order_ship")
	sqlOrderCancel           = query("order_cancel")
	sqlPoisonInsert          = query("poison_insert")
)

// ErrVersionConflict: an optimistic-locking update found the row at another
// version than the writer last wrote. Writers own disjoint rows, so this means
// something outside the workload changed its rows.
var ErrVersionConflict = errors.New("optimistic lock: row version changed")

// txBatch groups business changes into transactions of changesPerTx changes,
// each transaction running as the application role scoped to one tenant at a
// time. Events count as written only once their transaction commits.
type txBatch struct {
	pool         *pgxpool.Pool
	appRole      string
	changesPerTx int

	tx       pgx.Tx
	tenantID int64
	changes  int
	pending  map[string]int64 // events of the open transaction, by type

	committed map[string]int64 // events committed, by type
	onCommit  func(events int64)
}

func newTxBatch(pool *pgxpool.Pool, appRole string, changesPerTx int, onCommit func(int64)) *txBatch {
	return &txBatch{
		pool:         pool,
		appRole:      appRole,
		changesPerTx: changesPerTx,
		pending:      map[string]int64{},
		committed:    map[string]int64{},
		onCommit:     onCommit,
	}
}

// begin returns the open transaction, scoped to tenantID, opening one if needed.
func (b *txBatch) begin(ctx context.Context, tenantID int64) (pgx.Tx, error) {
	tenant := strconv.FormatInt(tenantID, 10)
	if b.tx == nil {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("begin transaction: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlTxScope, b.appRole, tenant); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("set role %s and tenant %d: %w", b.appRole, tenantID, err)
		}
		b.tx, b.tenantID = tx, tenantID
		return tx, nil
	}
	if b.tenantID != tenantID {
		if _, err := b.tx.Exec(ctx, sqlTxTenant, tenant); err != nil {
			return nil, fmt.Errorf("switch transaction to tenant %d: %w", tenantID, err)
		}
		b.tenantID = tenantID
	}
	return b.tx, nil
}

// enqueue writes ev into the open transaction (the caller has just made the
// business change it describes) and commits when the batch is full.
func (b *txBatch) enqueue(ctx context.Context, ev events.Event, traceID string) error {
	if err := events.Enqueue(ctx, b.tx, b.tenantID, ev, events.WithTraceID(traceID)); err != nil {
		return err
	}
	b.pending[ev.EventType()]++
	b.changes++
	if b.changes >= b.changesPerTx {
		return b.commit(ctx)
	}
	return nil
}

// commit commits the open transaction, if any.
func (b *txBatch) commit(ctx context.Context) error {
	if b.tx == nil {
		return nil
	}
	tx := b.tx
	b.tx = nil
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit %d changes: %w", b.changes, err)
	}
	var committed int64
	for eventType, n := range b.pending {
		b.committed[eventType] += n
		committed += n
		delete(b.pending, eventType)
	}
	b.changes = 0
	if b.onCommit != nil {
		b.onCommit(committed)
	}
	return nil
}

// rollback abandons the open transaction, if any. It uses its own short
// context: it runs when the caller's context may already be cancelled.
func (b *txBatch) rollback() {
	if b.tx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.tx.Rollback(ctx)
	b.tx = nil
	clear(b.pending)
	b.changes = 0
}

func scanProduct(row pgx.Row) (events.ProductState, error) {
	var (
		p            events.ProductState
		categoryID   *int64
		categoryName *string
	)
	if err := row.Scan(&p.ID, &p.Version, &p.SKU, &p.Name, &p.Description, &categoryID, &categoryName,
		&p.PriceCents, &p.Currency, &p.Status); err != nil {
		return p, err
	}
	if categoryID != nil {
		p.Category = &events.CategoryRef{ID: *categoryID}
		if categoryName != nil {
			p.Category.Name = *categoryName
		}
	}
	return p, nil
}

func scanOrder(row pgx.Row) (events.OrderState, error) {
	var o events.OrderState
	err := row.Scan(&o.ID, &o.Version, &o.Status, &o.Currency, &o.TotalCents, &o.PlacedAt,
		&o.ConfirmedAt, &o.ShippedAt, &o.CancelledAt)
	return o, err
}

// noRowAsConflict turns the empty result of an optimistic-locking statement
// into ErrVersionConflict.
func noRowAsConflict(err error, what string, id, version int64) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s %d at version %d: %w", what, id, version, ErrVersionConflict)
	}
	return fmt.Errorf("%s %d at version %d: %w", what, id, version, err)
}
