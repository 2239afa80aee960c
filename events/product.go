package events

import "fmt"

// Limits on product text, so one payload cannot bloat the graph or its indexes.
const (
	maxSKULen          = 256
	maxNameLen         = 1024
	maxDescriptionLen  = 65536
	maxCategoryNameLen = 1024
)

// Product statuses (products.status).
const (
	ProductStatusActive       = "active"
	ProductStatusDiscontinued = "discontinued"
)

// CategoryRef names the product's category (categories.id, categories.name).
type CategoryRef struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// ProductState is a product's whole non-personal state after a change; every
// Product event but ProductDeleted carries it.
type ProductState struct {
	// ID is products.id; it equals aggregate_id. Optional in stored payloads.
	ID int64 `json:"id"`
	// Version is products.version after the change. Required, >= 1.
	Version     int64  `json:"version"`
	SKU         string `json:"sku"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// Category is nil when products.category_id is NULL.
	Category   *CategoryRef `json:"category"`
	PriceCents int64        `json:"price_cents"`
	// Currency is an ISO 4217 code, e.g. "EUR".
	Currency string `json:"currency"`
	// Status is "active" or "discontinued".
	Status string `json:"status"`
}

// AggregateType implements Event.
func (ProductState) AggregateType() string { return AggregateProduct }

// AggregateID implements Event.
func (s ProductState) AggregateID() int64 { return s.ID }

// AggregateVersion implements Event.
func (s ProductState) AggregateVersion() int64 { return s.Version }

func (s ProductState) validate() error {
	if err := checkVersion(s.Version); err != nil {
		return err
	}
	if err := checkText("sku", s.SKU, 1, maxSKULen); err != nil {
		return err
	}
	if err := checkText("name", s.Name, 1, maxNameLen); err != nil {
		return err
	}
	if err := checkText("description", s.Description, 0, maxDescriptionLen); err != nil {
		return err
	}
	if s.Category != nil {
		if s.Category.ID <= 0 {
			return fmt.Errorf("category.id must be > 0, got %d", s.Category.ID)
		}
		if err := checkText("category.name", s.Category.Name, 1, maxCategoryNameLen); err != nil {
			return err
		}
	}
	if s.PriceCents < 0 {
		return fmt.Errorf("price_cents must be >= 0, got %d", s.PriceCents)
	}
	if err := checkCurrency("currency", s.Currency); err != nil {
		return err
	}
	if s.Status != ProductStatusActive && s.Status != ProductStatusDiscontinued {
		return fmt.Errorf("status must be %q or %q, got %.64q", ProductStatusActive, ProductStatusDiscontinued, s.Status)
	}
	return nil
}

// productRequired are the payload keys every ProductState-carrying event must have.
var productRequired = []string{"version", "sku", "name", "price_cents", "currency", "status", "category.id", "category.name"}

// ProductCreated (v2): a product row was inserted.
//
// v1 (legacy, upcast on decode) had "price" as a decimal string ("19.99") and a
// flat "category_id"/"category_name" instead of "price_cents" and "category".
type ProductCreated struct{ ProductState }

// EventType implements Event.
func (ProductCreated) EventType() string { return TypeProductCreated }

// EventVersion implements Event.
func (ProductCreated) EventVersion() int16 { return 2 }

// Validate implements Event.
func (e ProductCreated) Validate() error { return e.validate() }

// ProductUpdated (v1): any product column changed; carries the full new state.
type ProductUpdated struct{ ProductState }

// EventType implements Event.
func (ProductUpdated) EventType() string { return TypeProductUpdated }

// EventVersion implements Event.
func (ProductUpdated) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e ProductUpdated) Validate() error { return e.validate() }

// ProductPriceChanged (v1): price_cents (and maybe currency) changed.
type ProductPriceChanged struct {
	ProductState
	// OldPriceCents is informational and never projected. Optional.
	OldPriceCents *int64 `json:"old_price_cents,omitempty"`
}

// EventType implements Event.
func (ProductPriceChanged) EventType() string { return TypeProductPriceChanged }

// EventVersion implements Event.
func (ProductPriceChanged) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e ProductPriceChanged) Validate() error { return e.validate() }

// ProductDiscontinued (v1): status became "discontinued".
type ProductDiscontinued struct{ ProductState }

// EventType implements Event.
func (ProductDiscontinued) EventType() string { return TypeProductDiscontinued }

// EventVersion implements Event.
func (ProductDiscontinued) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e ProductDiscontinued) Validate() error {
	if err := e.validate(); err != nil {
		return err
	}
	if e.Status != ProductStatusDiscontinued {
		return fmt.Errorf("status must be %q in %s, got %.64q", ProductStatusDiscontinued, TypeProductDiscontinued, e.Status)
	}
	return nil
}

// ProductDeleted (v1): the product row was deleted (only products without
// order lines can be). The graph keeps a tombstone so a late event cannot
// bring the product back.
type ProductDeleted struct {
	// ID is products.id; it equals aggregate_id. Optional in stored payloads.
	ID int64 `json:"id"`
	// Version is products.version of the row when it was deleted. Required, >= 1.
	// An equal version still wins over the last update: the outbox id breaks ties.
	Version int64 `json:"version"`
}

// AggregateType implements Event.
func (ProductDeleted) AggregateType() string { return AggregateProduct }

// AggregateID implements Event.
func (e ProductDeleted) AggregateID() int64 { return e.ID }

// AggregateVersion implements Event.
func (e ProductDeleted) AggregateVersion() int64 { return e.Version }

// EventType implements Event.
func (ProductDeleted) EventType() string { return TypeProductDeleted }

// EventVersion implements Event.
func (ProductDeleted) EventVersion() int16 { return 1 }

// Validate implements Event.
func (e ProductDeleted) Validate() error { return checkVersion(e.Version) }
