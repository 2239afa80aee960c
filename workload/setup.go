package workload

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/events"
)

// tenantData is one tenant's reference data, read-only once setup returns.
type tenantData struct {
	id         int64
	index      int
	currency   string
	categories []events.CategoryRef
	customers  []customerRef
	// products are the tenant's initial products in creation order; writers
	// take ownership of them (see newWriters) and setup never touches them again.
	products []*events.ProductState
}

type customerRef struct {
	ref     events.CustomerRef
	address string
}

// setupStream separates setup's random streams from the writers' (which use
// their index as stream).
const setupStream = 1 << 32

// setup creates the tenants (as the pool's role: the application role cannot),
// then, as the application role, each tenant's categories, customers and
// products, one tenant after the other so that ids are assigned in a
// deterministic order. It returns the events it committed by type.
func setup(ctx context.Context, pool *pgxpool.Pool, cfg Config, onCommit func(int64)) ([]*tenantData, map[string]int64, error) {
	tenants, err := createTenants(ctx, pool, cfg)
	if err != nil {
		return nil, nil, err
	}
	batch := newTxBatch(pool, cfg.AppRole, cfg.OrdersPerTx, onCommit)
	for _, tenant := range tenants {
		rng := rand.New(rand.NewPCG(uint64(cfg.Seed), setupStream+uint64(tenant.index)))
		if err := createReferenceData(ctx, pool, cfg, tenant, rng); err != nil {
			batch.rollback()
			return tenants, batch.committed, fmt.Errorf("tenant %d: %w", tenant.id, err)
		}
		if err := createProducts(ctx, batch, cfg, tenant, rng); err != nil {
			batch.rollback()
			return tenants, batch.committed, fmt.Errorf("tenant %d: %w", tenant.id, err)
		}
	}
	if err := batch.commit(ctx); err != nil {
		batch.rollback()
		return tenants, batch.committed, err
	}
	return tenants, batch.committed, nil
}

func createTenants(ctx context.Context, pool *pgxpool.Pool, cfg Config) ([]*tenantData, error) {
	tenants := make([]*tenantData, 0, cfg.Tenants)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range cfg.Tenants {
			tenant := &tenantData{index: i, currency: tenantCurrencies[i%len(tenantCurrencies)]}
			if err := tx.QueryRow(ctx, sqlTenantInsert, tenantName(i)).Scan(&tenant.id); err != nil {
				return fmt.Errorf("insert tenant %q: %w", tenantName(i), err)
			}
			tenants = append(tenants, tenant)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create tenants: %w", err)
	}
	return tenants, nil
}

// createReferenceData inserts the tenant's categories and customers in one
// transaction: neither has events of its own.
func createReferenceData(ctx context.Context, pool *pgxpool.Pool, cfg Config, tenant *tenantData, rng *rand.Rand) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlTxScope, cfg.AppRole, fmt.Sprint(tenant.id)); err != nil {
			return fmt.Errorf("set role %s: %w", cfg.AppRole, err)
		}
		var queue pgx.Batch
		for i := range cfg.CategoriesPerTenant {
			name := categoryName(i)
			queue.Queue(sqlCategoryInsert, tenant.id, name).QueryRow(func(row pgx.Row) error {
				ref := events.CategoryRef{Name: name}
				if err := row.Scan(&ref.ID); err != nil {
					return fmt.Errorf("insert category %q: %w", name, err)
				}
				tenant.categories = append(tenant.categories, ref)
				return nil
			})
		}
		for i := range cfg.CustomersPerTenant {
			c := newFakeCustomer(rng, i)
			queue.Queue(sqlCustomerInsert, tenant.id, c.email, c.fullName, c.phone, c.address, c.segment, c.countryCode).
				QueryRow(func(row pgx.Row) error {
					ref := customerRef{ref: events.CustomerRef{Segment: c.segment, CountryCode: c.countryCode}, address: c.address}
					if err := row.Scan(&ref.ref.ID); err != nil {
						return fmt.Errorf("insert customer %d: %w", i, err)
					}
					tenant.customers = append(tenant.customers, ref)
					return nil
				})
		}
		return tx.SendBatch(ctx, &queue).Close()
	})
}

func createProducts(ctx context.Context, batch *txBatch, cfg Config, tenant *tenantData, rng *rand.Rand) error {
	for i := range cfg.ProductsPerTenant {
		category := pick(rng, tenant.categories)
		draft := productDraft{
			sku:         fmt.Sprintf("SKU-%02d-%06d", tenant.index, i+1),
			name:        productName(rng),
			description: productDescription(rng),
			categoryID:  category.ID,
			priceCents:  priceCents(rng),
			currency:    tenant.currency,
		}
		product, err := insertProduct(ctx, batch, tenant.id, draft, traceID(rng))
		if err != nil {
			return err
		}
		tenant.products = append(tenant.products, product)
	}
	return nil
}

type productDraft struct {
	sku, name, description string
	categoryID             int64
	priceCents             int64
	currency               string
}

// insertProduct inserts a product and enqueues its ProductCreated.
func insertProduct(ctx context.Context, batch *txBatch, tenantID int64, d productDraft, trace string) (*events.ProductState, error) {
	tx, err := batch.begin(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	state, err := scanProduct(tx.QueryRow(ctx, sqlProductInsert, tenantID, d.sku, d.name, d.description,
		d.categoryID, d.priceCents, d.currency))
	if err != nil {
		return nil, fmt.Errorf("insert product %s: %w", d.sku, err)
	}
	if err := batch.enqueue(ctx, events.ProductCreated{ProductState: state}, trace); err != nil {
		return nil, err
	}
	return &state, nil
}
