package events

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var placedAt = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func TestDecodeCurrentVersions(t *testing.T) {
	confirmedAt := placedAt.Add(time.Hour)
	tests := []Event{
		ProductCreated{productState(7, 1)},
		ProductUpdated{productState(7, 2)},
		ProductPriceChanged{ProductState: productState(7, 3), OldPriceCents: ptr(int64(1999))},
		ProductDiscontinued{withStatus(productState(7, 4), ProductStatusDiscontinued)},
		ProductDeleted{ID: 7, Version: 5},
		orderPlaced(9, 1),
		OrderConfirmed{OrderState{ID: 9, Version: 2, Status: OrderStatusConfirmed, Currency: "EUR", TotalCents: 500, PlacedAt: placedAt, ConfirmedAt: &confirmedAt}},
		OrderShipped{OrderState{ID: 9, Version: 3, Status: OrderStatusShipped, Currency: "EUR", TotalCents: 500, PlacedAt: placedAt, ConfirmedAt: &confirmedAt, ShippedAt: &confirmedAt}},
		OrderCancelled{OrderState{ID: 9, Version: 3, Status: OrderStatusCancelled, Currency: "EUR", TotalCents: 500, PlacedAt: placedAt, CancelledAt: &confirmedAt}},
	}
	for _, want := range tests {
		t.Run(want.EventType(), func(t *testing.T) {
			payload, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(Record{AggregateType: want.AggregateType(), AggregateID: want.AggregateID(),
				EventType: want.EventType(), EventVersion: want.EventVersion(), Payload: payload})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			gotJSON, _ := json.Marshal(got)
			if string(gotJSON) != string(payload) {
				t.Fatalf("round trip:\n got %s\nwant %s", gotJSON, payload)
			}
			if v, _ := Current(want.EventType()); v != want.EventVersion() {
				t.Fatalf("Current(%s) = %d, want %d", want.EventType(), v, want.EventVersion())
			}
		})
	}
}

func TestDecodeUpcastsProductCreatedV1(t *testing.T) {
	payload := `{"version": 1, "sku": "SKU-1", "name": "Mug", "description": "A mug",
		"category_id": 3, "category_name": "Kitchen", "price": "19.9", "currency": "EUR", "status": "active"}`
	got, err := Decode(Record{AggregateType: AggregateProduct, AggregateID: 5, EventType: TypeProductCreated, EventVersion: 1, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	want := ProductCreated{ProductState{ID: 5, Version: 1, SKU: "SKU-1", Name: "Mug", Description: "A mug",
		Category: &CategoryRef{ID: 3, Name: "Kitchen"}, PriceCents: 1990, Currency: "EUR", Status: "active"}}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("upcast:\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if got.EventVersion() != 2 {
		t.Fatalf("upcast event version = %d, want 2", got.EventVersion())
	}
}

func TestDecodeErrors(t *testing.T) {
	placed := func(mutate func(map[string]any)) string {
		doc := toMap(orderPlaced(42, 1))
		mutate(doc)
		b, _ := json.Marshal(doc)
		return string(b)
	}
	tests := []struct {
		name, eventType string
		version         int16
		aggregateType   string
		payload         string
		want            string
		kind            error
	}{
		{"unknown type", "ProductFrobbed", 1, "Product", `{}`, `"ProductFrobbed" v1 (outbox id 42): unknown event type`, ErrUnknownEvent},
		{"unknown version", "OrderPlaced", 7, "Order", `{}`, `OrderPlaced v7 (outbox id 42): unknown event version (known: 1)`, ErrUnknownEvent},
		{"wrong aggregate type", "OrderPlaced", 1, "Product", placed(func(map[string]any) {}), `aggregate_type must be "Order", got "Product"`, ErrInvalidPayload},
		{"not json", "OrderPlaced", 1, "Order", `{"version": `, `payload is not valid JSON`, ErrInvalidPayload},
		{"not an object", "OrderPlaced", 1, "Order", `[1]`, `payload must be a JSON object, got an array`, ErrInvalidPayload},
		{"data after the object", "OrderPlaced", 1, "Order", placed(func(map[string]any) {}) + " {}", `payload has data after the JSON object`, ErrInvalidPayload},
		{"a stray brace after the object", "OrderPlaced", 1, "Order", placed(func(map[string]any) {}) + " }", `payload has data after the JSON object`, ErrInvalidPayload},
		{"a NUL after the object", "OrderPlaced", 1, "Order", placed(func(map[string]any) {}) + "\x00", `payload has data after the JSON object`, ErrInvalidPayload},
		{"empty", "OrderPlaced", 1, "Order", ``, `payload is empty`, ErrInvalidPayload},
		{"missing version", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { delete(d, "version") }), `version is required`, ErrInvalidPayload},
		{"null field", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["currency"] = nil }), `currency is required`, ErrInvalidPayload},
		{"missing line field", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { delete(line(d, 1), "quantity") }), `lines[1].quantity is required`, ErrInvalidPayload},
		{"negative quantity", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { line(d, 1)["quantity"] = -3 }),
			`OrderPlaced v1 (outbox id 42): lines[1].quantity must be > 0, got -3`, ErrInvalidPayload},
		{"wrong type", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { line(d, 0)["quantity"] = "two" }), `lines[0].quantity has the wrong type: got JSON string, want int32`, ErrInvalidPayload},
		{"quantity overflow", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { line(d, 0)["quantity"] = 3e9 }), `lines[0].quantity does not fit: got JSON number 3000000000, want int32`, ErrInvalidPayload},
		{"customer not object", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["customer"] = "x" }), `customer must be an object, got a string`, ErrInvalidPayload},
		{"a key twice but for case", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["VERSION"] = 2147483647 }),
			`payload keys "VERSION" and "version" differ only in case`, ErrInvalidPayload},
		{"a nested key twice but for case", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { line(d, 1)["Product_ID"] = 99 }),
			`payload keys "lines[1].Product_ID" and "lines[1].product_id" differ only in case`, ErrInvalidPayload},
		{"a key twice but for the Kelvin sign", "ProductUpdated", 1, "Product", `{"version":2,"sku":"a","s\u212au":"b"}`,
			`differ only in case`, ErrInvalidPayload},
		{"id mismatch", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["id"] = 43 }), `id 43 does not match aggregate_id 42`, ErrInvalidPayload},
		{"status mismatch", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["status"] = "shipped" }), `status must be "placed" in OrderPlaced, got "shipped"`, ErrInvalidPayload},
		{"long status cut", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["status"] = strings.Repeat("s", 100_000) }),
			`status must be "placed" in OrderPlaced, got "` + strings.Repeat("s", 64) + `"`, ErrInvalidPayload},
		{"duplicate line", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { line(d, 1)["line_no"] = 1 }), `lines[1].line_no 1 repeats lines[0]`, ErrInvalidPayload},
		{"no lines", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["lines"] = []any{} }), `lines must not be empty`, ErrInvalidPayload},
		{"bad time", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["placed_at"] = "yesterday" }), `payload does not decode`, ErrInvalidPayload},
		{"zero time", "OrderPlaced", 1, "Order", placed(func(d map[string]any) { d["placed_at"] = "0001-01-01T00:00:00Z" }),
			`placed_at is missing or the zero time (0001-01-01T00:00:00Z)`, ErrInvalidPayload},
		{"nested too deep", "OrderPlaced", 1, "Order", placed(func(d map[string]any) {
			var deep any = 1
			for range 20_000 {
				deep = []any{deep}
			}
			d["note"] = deep
		}), `payload is not valid JSON`, ErrInvalidPayload},
		{"confirmed without time", "OrderConfirmed", 1, "Order", placed(func(d map[string]any) { d["status"] = "confirmed" }), `confirmed_at is required`, ErrInvalidPayload},
		{"v1 price with cents", "ProductCreated", 1, "Product", `{"version":1,"sku":"a","name":"b","price":"1.999","currency":"EUR","status":"active"}`, `price must be a non-negative decimal with at most 2 decimals`, ErrInvalidPayload},
		{"v1 negative price", "ProductCreated", 1, "Product", `{"version":1,"sku":"a","name":"b","price":-1,"currency":"EUR","status":"active"}`, `price must be a non-negative decimal`, ErrInvalidPayload},
		{"v1 category without name", "ProductCreated", 1, "Product", `{"version":1,"sku":"a","name":"b","price":1,"category_id":3,"currency":"EUR","status":"active"}`, `category_name is required with category_id`, ErrInvalidPayload},
		{"v2 shape stored as v1", "ProductCreated", 1, "Product", `{"version":1,"sku":"a","name":"b","price_cents":100,"currency":"EUR","status":"active"}`, `price is required`, ErrInvalidPayload},
		{"negative price", "ProductUpdated", 1, "Product", `{"version":1,"sku":"a","name":"b","price_cents":-1,"currency":"EUR","status":"active"}`, `price_cents must be >= 0, got -1`, ErrInvalidPayload},
		{"bad currency", "ProductUpdated", 1, "Product", `{"version":1,"sku":"a","name":"b","price_cents":1,"currency":"euro","status":"active"}`, `currency must be three upper-case letters, got "euro"`, ErrInvalidPayload},
		{"category id missing", "ProductUpdated", 1, "Product", `{"version":1,"sku":"a","name":"b","price_cents":1,"currency":"EUR","status":"active","category":{"name":"x"}}`, `category.id is required`, ErrInvalidPayload},
		{"discontinued active", "ProductDiscontinued", 1, "Product", `{"version":1,"sku":"a","name":"b","price_cents":1,"currency":"EUR","status":"active"}`, `status must be "discontinued" in ProductDiscontinued`, ErrInvalidPayload},
		{"version zero", "ProductDeleted", 1, "Product", `{"version":0}`, `version must be >= 1, got 0`, ErrInvalidPayload},
		{"version past INTEGER", "ProductDeleted", 1, "Product", `{"version":9000000000000000000}`, `version must be <= 2147483647 (the version columns are INTEGER), got 9000000000000000000`, ErrInvalidPayload},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(Record{OutboxID: 42, AggregateType: tc.aggregateType, AggregateID: 42, EventType: tc.eventType, EventVersion: tc.version, Payload: []byte(tc.payload)})
			if err == nil {
				t.Fatal("Decode succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if !errors.Is(err, tc.kind) {
				t.Fatalf("error %q is not %v", err, tc.kind)
			}
		})
	}
}

// An event over the configured limits is refused naming the limit; the
// defaults take a real B2B order (issue 37: a 5,000-line OrderPlaced of
// about 369 kB went to the DLQ under the old 256 KiB / 1,000-line defaults).
func TestDecodeLimits(t *testing.T) {
	placedWith := func(n int, note string) []byte {
		doc := toMap(orderPlaced(42, 1))
		first := doc["lines"].([]any)[0].(map[string]any)
		lines := make([]any, n)
		for i := range lines {
			l := map[string]any{}
			for k, v := range first {
				l[k] = v
			}
			l["line_no"] = i + 1
			lines[i] = l
		}
		doc["lines"] = lines
		if note != "" {
			doc["note"] = note
		}
		b, _ := json.Marshal(doc)
		return b
	}
	record := func(payload []byte) Record {
		return Record{OutboxID: 42, AggregateType: AggregateOrder, AggregateID: 42, EventType: TypeOrderPlaced, EventVersion: 1, Payload: payload}
	}
	limits := Limits{MaxPayloadBytes: 64 << 10, MaxOrderLines: 10}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"payload over the limit", placedWith(1, strings.Repeat("x", limits.MaxPayloadBytes)), `bytes, over the limit of 65536 (max payload bytes)`},
		{"too many lines", placedWith(limits.MaxOrderLines+1, ""), `lines has 11 entries, over the limit of 10 (max order lines)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeWithin(record(tc.payload), limits)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidPayload) {
				t.Fatalf("DecodeWithin = %v, want an invalid payload error containing %q", err, tc.want)
			}
		})
	}
	big := placedWith(5000, "")
	if len(big) < 256<<10 {
		t.Fatalf("a 5,000-line order is %d bytes: the test wants one over the old 256 KiB default", len(big))
	}
	ev, err := Decode(record(big))
	if err != nil {
		t.Fatalf("a valid 5,000-line order (%d bytes) under the default limits: %v", len(big), err)
	}
	if got := len(ev.(OrderPlaced).Lines); got != 5000 {
		t.Fatalf("decoded %d lines, want 5000", got)
	}
}

func TestDecodeIgnoresPersonalData(t *testing.T) {
	doc := toMap(orderPlaced(9, 1))
	customer := doc["customer"].(map[string]any)
	customer["email"] = "jane@example.com"
	customer["full_name"] = "Jane Doe"
	doc["shipping_address"] = "1 Main St"
	payload, _ := json.Marshal(doc)
	ev, err := Decode(Record{AggregateType: AggregateOrder, AggregateID: 9, EventType: TypeOrderPlaced, EventVersion: 1, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(ev)
	for _, personal := range []string{"jane@example.com", "Jane Doe", "1 Main St"} {
		if strings.Contains(string(out), personal) {
			t.Fatalf("decoded event keeps %q: %s", personal, out)
		}
	}
}

func productState(id, version int64) ProductState {
	return ProductState{ID: id, Version: version, SKU: "SKU-1", Name: "Mug", Description: "A mug",
		Category: &CategoryRef{ID: 3, Name: "Kitchen"}, PriceCents: 1999, Currency: "EUR", Status: ProductStatusActive}
}

func withStatus(s ProductState, status string) ProductState {
	s.Status = status
	return s
}

func orderPlaced(id, version int64) OrderPlaced {
	return OrderPlaced{
		OrderState: OrderState{ID: id, Version: version, Status: OrderStatusPlaced, Currency: "EUR", TotalCents: 500, PlacedAt: placedAt},
		Customer:   CustomerRef{ID: 11, Segment: "retail", CountryCode: "DE"},
		Lines: []OrderLine{
			{LineNo: 1, ProductID: 7, Quantity: 2, UnitPriceCents: 100},
			{LineNo: 2, ProductID: 8, Quantity: 1, UnitPriceCents: 300},
		},
	}
}

func toMap(ev Event) map[string]any {
	b, _ := json.Marshal(ev)
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	return doc
}

func line(doc map[string]any, i int) map[string]any {
	return doc["lines"].([]any)[i].(map[string]any)
}

func ptr[T any](v T) *T { return &v }

func TestDecodeNamesEmbeddedFieldsByPayloadKey(t *testing.T) {
	doc := toMap(orderPlaced(9, 1))
	doc["total_cents"] = "lots"
	payload, _ := json.Marshal(doc)
	_, err := Decode(Record{AggregateType: AggregateOrder, AggregateID: 9, EventType: TypeOrderPlaced, EventVersion: 1, Payload: payload})
	if want := "OrderPlaced v1: total_cents has the wrong type: got JSON string, want int64"; err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}

// Keys no event reads may differ only in case: nothing decodes them, so
// nothing is ambiguous.
func TestDecodeLeavesCaseTwinsNoEventReads(t *testing.T) {
	doc := toMap(orderPlaced(42, 1))
	doc["traceId"], doc["traceID"] = "a", "b"
	doc["meta"] = map[string]any{"Source": 1, "source": 2}
	payload, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(Record{OutboxID: 42, AggregateType: "Order", AggregateID: 42, EventType: "OrderPlaced", EventVersion: 1, Payload: payload}); err != nil {
		t.Errorf("unknown keys differing only in case: %v", err)
	}
}
