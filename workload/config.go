package workload

import (
	"errors"
	"fmt"
)

// Config sizes and shapes a workload. Zero values take the documented
// defaults; for the knobs marked "negative disables", a negative value turns
// that kind of change off.
type Config struct {
	// Seed makes the workload deterministic: the same Seed, sizes and Writers
	// give the same multiset of events (ids and timestamps aside). Default 1.
	Seed int64
	// Tenants is how many tenants are created. Default 3.
	Tenants int
	// CategoriesPerTenant is how many categories each tenant gets. Default 4.
	CategoriesPerTenant int
	// ProductsPerTenant is how many products each tenant starts with. Default 20.
	ProductsPerTenant int
	// CustomersPerTenant is how many customers each tenant gets. Default 10.
	CustomersPerTenant int
	// Orders is the number of orders placed across all tenants. Default 60.
	Orders int
	// Writers is the number of concurrent writer goroutines (each holds one
	// connection). Each owns a disjoint slice of the products and orders, so
	// writers never update the same row. Capped at Tenants*ProductsPerTenant.
	// Default 4.
	Writers int
	// OrdersPerTx is how many business changes (each with its event) one
	// transaction carries. Default 1: one change, one event per transaction,
	// as an application writes them. Larger values batch changes for fast bulk
	// backlogs; a transaction still never commits a change without its event.
	OrdersPerTx int

	// CancelPercent is the share of orders that end cancelled (a third of
	// them after being confirmed). Default 15; negative disables.
	CancelPercent int
	// ConfirmPercent is the share of orders not cancelled that get confirmed.
	// Default 80; negative disables.
	ConfirmPercent int
	// ShipPercent is the share of confirmed orders that get shipped.
	// Default 75; negative disables.
	ShipPercent int
	// PriceChangeEvery: after every PriceChangeEvery-th order (counted across
	// all writers), one active product is re-priced (ProductPriceChanged).
	// Default 5; negative disables.
	PriceChangeEvery int
	// UpdateEvery: after every UpdateEvery-th order, one active product's
	// description is rewritten (ProductUpdated). Default 10; negative disables.
	UpdateEvery int
	// DiscontinueEvery: after every DiscontinueEvery-th order, one active
	// product is discontinued (ProductDiscontinued), unless it is its writer's
	// last active product in that tenant. Default 25; negative disables.
	DiscontinueEvery int
	// DeleteEvery: after every DeleteEvery-th order, a product is created and,
	// before the writer's next order, deleted without ever being ordered
	// (ProductCreated then ProductDeleted). Default 20; negative disables.
	DeleteEvery int
	// MaxOpenOrders bounds the orders each writer keeps in flight before it
	// drives the oldest to its final status; it keeps memory flat however
	// many orders are placed. Default 32.
	MaxOpenOrders int
	// AppRole is the role business transactions run as (SET LOCAL ROLE), under
	// row-level security scoped to the tenant. The pool's user must be a member
	// of it (a superuser is). Default "graphsync_app".
	AppRole string
}

// Defaults, as documented on Config.
const (
	defaultSeed                = 1
	defaultTenants             = 3
	defaultCategoriesPerTenant = 4
	defaultProductsPerTenant   = 20
	defaultCustomersPerTenant  = 10
	defaultOrders              = 60
	defaultWriters             = 4
	defaultOrdersPerTx         = 1
	defaultCancelPercent       = 15
	defaultConfirmPercent      = 80
	defaultShipPercent         = 75
	defaultPriceChangeEvery    = 5
	defaultUpdateEvery         = 10
	defaultDiscontinueEvery    = 25
	defaultDeleteEvery         = 20
	defaultMaxOpenOrders       = 32
	defaultAppRole             = "graphsync_app"
)

// ErrInvalidConfig is wrapped by Run when the Config cannot be used.
var ErrInvalidConfig = errors.New("invalid workload config")

func orDefault(value, fallback int) int {
	if value == 0 {
		return fallback
	}
	return value
}

func (c Config) withDefaults() Config {
	if c.Seed == 0 {
		c.Seed = defaultSeed
	}
	c.Tenants = orDefault(c.Tenants, defaultTenants)
	c.CategoriesPerTenant = orDefault(c.CategoriesPerTenant, defaultCategoriesPerTenant)
	c.ProductsPerTenant = orDefault(c.ProductsPerTenant, defaultProductsPerTenant)
	c.CustomersPerTenant = orDefault(c.CustomersPerTenant, defaultCustomersPerTenant)
	c.Orders = orDefault(c.Orders, defaultOrders)
	c.Writers = orDefault(c.Writers, defaultWriters)
	c.OrdersPerTx = orDefault(c.OrdersPerTx, defaultOrdersPerTx)
	c.CancelPercent = orDefault(c.CancelPercent, defaultCancelPercent)
	c.ConfirmPercent = orDefault(c.ConfirmPercent, defaultConfirmPercent)
	c.ShipPercent = orDefault(c.ShipPercent, defaultShipPercent)
	c.PriceChangeEvery = orDefault(c.PriceChangeEvery, defaultPriceChangeEvery)
	c.UpdateEvery = orDefault(c.UpdateEvery, defaultUpdateEvery)
	c.DiscontinueEvery = orDefault(c.DiscontinueEvery, defaultDiscontinueEvery)
	c.DeleteEvery = orDefault(c.DeleteEvery, defaultDeleteEvery)
	c.MaxOpenOrders = orDefault(c.MaxOpenOrders, defaultMaxOpenOrders)
	if c.AppRole == "" {
		c.AppRole = defaultAppRole
	}
	// Every writer must own at least one product to put on its orders.
	c.Writers = min(c.Writers, c.Tenants*c.ProductsPerTenant)
	return c
}

func (c Config) validate() error {
	positive := []struct {
		name  string
		value int
	}{
		{"Tenants", c.Tenants},
		{"CategoriesPerTenant", c.CategoriesPerTenant},
		{"ProductsPerTenant", c.ProductsPerTenant},
		{"CustomersPerTenant", c.CustomersPerTenant},
		{"Orders", c.Orders},
		{"Writers", c.Writers},
		{"OrdersPerTx", c.OrdersPerTx},
		{"MaxOpenOrders", c.MaxOpenOrders},
	}
	for _, p := range positive {
		if p.value < 1 {
			return fmt.Errorf("%w: %s must be >= 1, got %d", ErrInvalidConfig, p.name, p.value)
		}
	}
	percents := []struct {
		name  string
		value int
	}{
		{"CancelPercent", c.CancelPercent},
		{"ConfirmPercent", c.ConfirmPercent},
		{"ShipPercent", c.ShipPercent},
	}
	for _, p := range percents {
		if p.value > 100 {
			return fmt.Errorf("%w: %s must be <= 100, got %d", ErrInvalidConfig, p.name, p.value)
		}
	}
	return nil
}

// percent is a knob's share, with negative meaning none.
func percent(value int) int { return max(value, 0) }

// every reports whether the n-th order (1-based) triggers a change that
// happens every `every` orders; negative disables it.
func every(n, every int) bool { return every > 0 && n%every == 0 }
