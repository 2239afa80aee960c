package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/events"
)

// writer performs its own disjoint share of the workload: the orders whose
// index is congruent to its index modulo the writer count, and changes only to
// the products it owns. Since no other writer updates its rows, its random
// stream alone decides what it writes, and optimistic locking never fails
// unless something outside the workload touches the rows.
type writer struct {
	index int
	cfg   Config
	rng   *rand.Rand
	batch *txBatch
	// tenants are the tenants in which the writer owns at least one product.
	tenants []*writerTenant
	// open are the writer's orders not yet at their final status, oldest first.
	open []*openOrder
	// doomed are products created to be deleted before the writer's next order.
	doomed []doomedProduct
	// seq numbers the writer's throwaway products, for unique SKUs.
	seq int
}

type writerTenant struct {
	tenant *tenantData
	// products are the tenant's products this writer owns, active or discontinued.
	products []*events.ProductState
}

type openOrder struct {
	tenantID int64
	state    events.OrderState
	// steps are the statuses the order still goes through, in order.
	steps []string
}

type doomedProduct struct {
	tenantID int64
	state    *events.ProductState
}

// newWriters hands product g (counting across tenants in creation order) to
// writer g mod cfg.Writers.
func newWriters(pool *pgxpool.Pool, cfg Config, tenants []*tenantData, onCommit func(int64)) []*writer {
	writers := make([]*writer, cfg.Writers)
	for i := range writers {
		writers[i] = &writer{
			index: i,
			cfg:   cfg,
			rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(i))),
			batch: newTxBatch(pool, cfg.AppRole, cfg.OrdersPerTx, onCommit),
		}
	}
	global := 0
	for _, tenant := range tenants {
		slices := make([]*writerTenant, cfg.Writers)
		for _, product := range tenant.products {
			owner := global % cfg.Writers
			global++
			if slices[owner] == nil {
				slices[owner] = &writerTenant{tenant: tenant}
				writers[owner].tenants = append(writers[owner].tenants, slices[owner])
			}
			slices[owner].products = append(slices[owner].products, product)
		}
	}
	return writers
}

func (w *writer) run(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			w.batch.rollback()
			err = fmt.Errorf("writer %d: %w", w.index, err)
		}
	}()
	for i := w.index; i < w.cfg.Orders; i += w.cfg.Writers {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.step(ctx, i+1); err != nil {
			return err
		}
	}
	if err := w.deleteDoomed(ctx); err != nil {
		return err
	}
	for len(w.open) > 0 {
		if err := w.finishOldest(ctx); err != nil {
			return err
		}
	}
	return w.batch.commit(ctx)
}

// step places the n-th order (1-based, counted across writers) and makes the
// changes that go with it.
func (w *writer) step(ctx context.Context, n int) error {
	if err := w.deleteDoomed(ctx); err != nil {
		return err
	}
	if err := w.placeOrder(ctx); err != nil {
		return err
	}
	// Interleave: usually move one random open order a step further...
	if len(w.open) > 0 && w.rng.IntN(3) != 0 {
		i := w.rng.IntN(len(w.open))
		if err := w.advance(ctx, i); err != nil {
			return err
		}
	}
	// ...and keep the number in flight (and memory) bounded.
	for len(w.open) > w.cfg.MaxOpenOrders {
		if err := w.finishOldest(ctx); err != nil {
			return err
		}
	}
	if every(n, w.cfg.PriceChangeEvery) {
		if err := w.reprice(ctx); err != nil {
			return err
		}
	}
	if every(n, w.cfg.UpdateEvery) {
		if err := w.redescribe(ctx); err != nil {
			return err
		}
	}
	if every(n, w.cfg.DiscontinueEvery) {
		if err := w.discontinue(ctx); err != nil {
			return err
		}
	}
	if every(n, w.cfg.DeleteEvery) {
		if err := w.createDoomed(ctx); err != nil {
			return err
		}
	}
	return nil
}

func active(products []*events.ProductState) []*events.ProductState {
	var list []*events.ProductState
	for _, p := range products {
		if p.Status == events.ProductStatusActive {
			list = append(list, p)
		}
	}
	return list
}

func (w *writer) placeOrder(ctx context.Context) error {
	wt := pick(w.rng, w.tenants)
	customer := pick(w.rng, wt.tenant.customers)
	// Discontinue keeps one active product per writer and tenant, so there is
	// always something to order.
	available := active(wt.products)
	lineCount := min(1+w.rng.IntN(4), len(available))
	chosen := w.rng.Perm(len(available))[:lineCount]
	var (
		lines                  []events.OrderLine
		lineNos, quantities    []int32
		productIDs, unitPrices []int64
		totalCents             int64
	)
	for i, index := range chosen {
		product := available[index]
		quantity := int32(1 + w.rng.IntN(3))
		if w.rng.IntN(10) == 0 {
			quantity = int32(5 + w.rng.IntN(8))
		}
		// The writer owns the product, so its price cannot change under us.
		line := events.OrderLine{LineNo: int32(i + 1), ProductID: product.ID, Quantity: quantity, UnitPriceCents: product.PriceCents}
		lines = append(lines, line)
		lineNos = append(lineNos, line.LineNo)
		productIDs = append(productIDs, line.ProductID)
		quantities = append(quantities, line.Quantity)
		unitPrices = append(unitPrices, line.UnitPriceCents)
		totalCents += int64(quantity) * product.PriceCents
	}
	steps := w.fate()
	trace := traceID(w.rng)

	tx, err := w.batch.begin(ctx, wt.tenant.id)
	if err != nil {
		return err
	}
	var state events.OrderState
	if err := tx.QueryRow(ctx, sqlOrderPlace, wt.tenant.id, customer.ref.ID, wt.tenant.currency, totalCents,
		customer.address, lineNos, productIDs, quantities, unitPrices).
		Scan(&state.ID, &state.Version, &state.Status, &state.Currency, &state.TotalCents, &state.PlacedAt); err != nil {
		return fmt.Errorf("place order for customer %d: %w", customer.ref.ID, err)
	}
	ev := events.OrderPlaced{OrderState: state, Customer: customer.ref, Lines: lines}
	if err := w.batch.enqueue(ctx, ev, trace); err != nil {
		return err
	}
	if len(steps) > 0 {
		w.open = append(w.open, &openOrder{tenantID: wt.tenant.id, state: state, steps: steps})
	}
	return nil
}

// fate draws the statuses a new order will go through after "placed".
func (w *writer) fate() []string {
	if w.rng.IntN(100) < percent(w.cfg.CancelPercent) {
		if w.rng.IntN(3) == 0 {
			return []string{events.OrderStatusConfirmed, events.OrderStatusCancelled}
		}
		return []string{events.OrderStatusCancelled}
	}
	if w.rng.IntN(100) >= percent(w.cfg.ConfirmPercent) {
		return nil
	}
	if w.rng.IntN(100) < percent(w.cfg.ShipPercent) {
		return []string{events.OrderStatusConfirmed, events.OrderStatusShipped}
	}
	return []string{events.OrderStatusConfirmed}
}

func (w *writer) finishOldest(ctx context.Context) error {
	for len(w.open[0].steps) > 1 {
		if err := w.advance(ctx, 0); err != nil {
			return err
		}
	}
	return w.advance(ctx, 0)
}

// advance moves open order i to its next status, dropping it from open when
// that status is its last.
func (w *writer) advance(ctx context.Context, i int) error {
	order := w.open[i]
	status := order.steps[0]
	trace := traceID(w.rng)
	tx, err := w.batch.begin(ctx, order.tenantID)
	if err != nil {
		return err
	}
	var statement string
	switch status {
	case events.OrderStatusConfirmed:
		statement = sqlOrderConfirm
	case events.OrderStatusShipped:
		statement = sqlOrderShip
	case events.OrderStatusCancelled:
		statement = sqlOrderCancel
	default:
		return fmt.Errorf("order %d: no transition to %q", order.state.ID, status)
	}
	state, err := scanOrder(tx.QueryRow(ctx, statement, order.state.ID, order.state.Version))
	if err != nil {
		return noRowAsConflict(err, "move to "+status+": order", order.state.ID, order.state.Version)
	}
	var ev events.Event
	switch status {
	case events.OrderStatusConfirmed:
		ev = events.OrderConfirmed{OrderState: state}
	case events.OrderStatusShipped:
		ev = events.OrderShipped{OrderState: state}
	default:
		ev = events.OrderCancelled{OrderState: state}
	}
	if err := w.batch.enqueue(ctx, ev, trace); err != nil {
		return err
	}
	order.state = state
	order.steps = order.steps[1:]
	if len(order.steps) == 0 {
		w.open = slices.Delete(w.open, i, i+1)
	}
	return nil
}

// pickActive draws one of the writer's tenants and one of its active products
// there; ok is false when that tenant has none left.
func (w *writer) pickActive() (*writerTenant, *events.ProductState, bool) {
	wt := pick(w.rng, w.tenants)
	available := active(wt.products)
	if len(available) == 0 {
		return wt, nil, false
	}
	return wt, pick(w.rng, available), true
}

func (w *writer) reprice(ctx context.Context) error {
	wt, product, ok := w.pickActive()
	if !ok {
		return nil
	}
	// -20% to +25%, kept on a .99 price point and never unchanged.
	newPrice := (product.PriceCents+1)*int64(80+w.rng.IntN(46))/100/100*100 - 1
	if newPrice < 99 {
		newPrice = 99
	}
	if newPrice == product.PriceCents {
		newPrice += 100
	}
	oldPrice := product.PriceCents
	trace := traceID(w.rng)
	state, err := w.updateProduct(ctx, wt.tenant.id, product, sqlProductSetPrice, "re-price", newPrice)
	if err != nil {
		return err
	}
	return w.commitProduct(ctx, product, state, events.ProductPriceChanged{ProductState: state, OldPriceCents: &oldPrice}, trace)
}

func (w *writer) redescribe(ctx context.Context) error {
	wt, product, ok := w.pickActive()
	if !ok {
		return nil
	}
	description := fmt.Sprintf("%s (revision %d)", productDescription(w.rng), product.Version+1)
	trace := traceID(w.rng)
	state, err := w.updateProduct(ctx, wt.tenant.id, product, sqlProductSetDescription, "update description of", description)
	if err != nil {
		return err
	}
	return w.commitProduct(ctx, product, state, events.ProductUpdated{ProductState: state}, trace)
}

func (w *writer) discontinue(ctx context.Context) error {
	wt := pick(w.rng, w.tenants)
	available := active(wt.products)
	if len(available) < 2 {
		return nil // keep something to order
	}
	product := pick(w.rng, available)
	trace := traceID(w.rng)
	state, err := w.updateProduct(ctx, wt.tenant.id, product, sqlProductDiscontinue, "discontinue")
	if err != nil {
		return err
	}
	return w.commitProduct(ctx, product, state, events.ProductDiscontinued{ProductState: state}, trace)
}

// updateProduct runs an optimistic-locking product statement whose first two
// parameters are id and version.
func (w *writer) updateProduct(ctx context.Context, tenantID int64, product *events.ProductState, statement, what string, args ...any) (events.ProductState, error) {
	tx, err := w.batch.begin(ctx, tenantID)
	if err != nil {
		return events.ProductState{}, err
	}
	state, err := scanProduct(tx.QueryRow(ctx, statement, append([]any{product.ID, product.Version}, args...)...))
	if err != nil {
		return state, noRowAsConflict(err, what+" product", product.ID, product.Version)
	}
	return state, nil
}

// commitProduct enqueues the event of a product change and then adopts the
// new state (the event is validated first: a rejected event leaves the
// writer's view as it was, and the transaction is rolled back by the caller).
func (w *writer) commitProduct(ctx context.Context, product *events.ProductState, state events.ProductState, ev events.Event, trace string) error {
	if err := w.batch.enqueue(ctx, ev, trace); err != nil {
		return err
	}
	*product = state
	return nil
}

// createDoomed creates a product that no order will reference; it is deleted
// before the writer's next order.
func (w *writer) createDoomed(ctx context.Context) error {
	wt := pick(w.rng, w.tenants)
	w.seq++
	draft := productDraft{
		sku:         fmt.Sprintf("TMP-%02d-W%02d-%06d", wt.tenant.index, w.index, w.seq),
		name:        productName(w.rng),
		description: "Limited run: " + productDescription(w.rng),
		categoryID:  pick(w.rng, wt.tenant.categories).ID,
		priceCents:  priceCents(w.rng),
		currency:    wt.tenant.currency,
	}
	state, err := insertProduct(ctx, w.batch, wt.tenant.id, draft, traceID(w.rng))
	if err != nil {
		return err
	}
	w.doomed = append(w.doomed, doomedProduct{tenantID: wt.tenant.id, state: state})
	return nil
}

func (w *writer) deleteDoomed(ctx context.Context) error {
	for len(w.doomed) > 0 {
		doomed := w.doomed[0]
		trace := traceID(w.rng)
		tx, err := w.batch.begin(ctx, doomed.tenantID)
		if err != nil {
			return err
		}
		var ev events.ProductDeleted
		if err := tx.QueryRow(ctx, sqlProductDelete, doomed.state.ID, doomed.state.Version).Scan(&ev.ID, &ev.Version); err != nil {
			return noRowAsConflict(err, "delete product", doomed.state.ID, doomed.state.Version)
		}
		if err := w.batch.enqueue(ctx, ev, trace); err != nil {
			return err
		}
		w.doomed = w.doomed[1:]
	}
	return nil
}
