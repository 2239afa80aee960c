package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// productCreatedV1 is the legacy ProductCreated payload, still accepted on
// decode: price was a decimal in major units ("19.99", as a string or a JSON
// number) and the category was flat.
type productCreatedV1 struct {
	ID           int64           `json:"id"`
	Version      int64           `json:"version"`
	SKU          string          `json:"sku"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	CategoryID   *int64          `json:"category_id"`
	CategoryName string          `json:"category_name"`
	Price        json.RawMessage `json:"price"`
	Currency     string          `json:"currency"`
	Status       string          `json:"status"`
}

var productCreatedV1Required = []string{"version", "sku", "name", "price", "currency", "status"}

// upcastProductCreatedV1 turns a v1 payload into the current ProductCreated.
func upcastProductCreatedV1(payload []byte, doc map[string]any) (Event, error) {
	var v1 productCreatedV1
	if err := unmarshal(payload, &v1); err != nil {
		return nil, err
	}
	priceCents, err := decimalToCents(v1.Price)
	if err != nil {
		return nil, fmt.Errorf("price %w", err)
	}
	ev := ProductCreated{ProductState{
		ID:          v1.ID,
		Version:     v1.Version,
		SKU:         v1.SKU,
		Name:        v1.Name,
		Description: v1.Description,
		PriceCents:  priceCents,
		Currency:    v1.Currency,
		Status:      v1.Status,
	}}
	if v1.CategoryID != nil {
		if _, named := doc["category_name"]; !named {
			return nil, errors.New("category_name is required with category_id")
		}
		ev.Category = &CategoryRef{ID: *v1.CategoryID, Name: v1.CategoryName}
	}
	return ev, nil
}

// decimalToCents parses a non-negative decimal with at most two fractional
// digits, given as a JSON string or number, exactly (no float rounding).
func decimalToCents(raw json.RawMessage) (int64, error) {
	text := strings.TrimSpace(string(raw))
	if strings.HasPrefix(text, `"`) {
		if err := json.Unmarshal(raw, &text); err != nil {
			return 0, fmt.Errorf("must be a decimal string or number: %v", err)
		}
	}
	whole, frac, hasFrac := strings.Cut(text, ".")
	if whole == "" || !allDigits(whole) || (hasFrac && (frac == "" || len(frac) > 2 || !allDigits(frac))) {
		return 0, fmt.Errorf("must be a non-negative decimal with at most 2 decimals, like \"19.99\", got %.40q", text)
	}
	for len(frac) < 2 {
		frac += "0"
	}
	var cents int64
	for _, digit := range whole + frac {
		d := int64(digit - '0')
		if cents > (math.MaxInt64-d)/10 {
			return 0, fmt.Errorf("is too large: %.40q", text)
		}
		cents = cents*10 + d
	}
	return cents, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
