package events

import (
	"encoding/json"
	"testing"
)

// FuzzDecode checks that no payload makes Decode panic, and that whatever it
// accepts is valid, keeps the row's aggregate id, and survives a round trip
// through its current version unchanged (upcasting is done once, fully).
func FuzzDecode(f *testing.F) {
	for _, ev := range []Event{
		ProductCreated{productState(7, 1)}, ProductUpdated{productState(7, 2)},
		ProductPriceChanged{ProductState: productState(7, 3)}, ProductDiscontinued{withStatus(productState(7, 4), ProductStatusDiscontinued)},
		ProductDeleted{ID: 7, Version: 5}, orderPlaced(7, 1),
	} {
		payload, _ := json.Marshal(ev)
		f.Add(ev.EventType(), ev.EventVersion(), string(payload))
	}
	f.Add(TypeProductCreated, int16(1), `{"version":1,"sku":"a","name":"b","price":"19.99","category_id":3,"category_name":"c","currency":"EUR","status":"active"}`)
	f.Add(TypeProductCreated, int16(1), `{"version":1,"sku":"a","name":"b","price":19.5,"currency":"EUR","status":"active"}`)
	f.Add(TypeProductCreated, int16(1), `{"version":1,"sku":"a","name":"b","price":"99999999999999999999","currency":"EUR","status":"active"}`)
	f.Add(TypeOrderConfirmed, int16(1), `{"version":2,"status":"confirmed","currency":"EUR","total_cents":1,"placed_at":"2026-05-01T12:00:00Z","confirmed_at":"2026-05-01T13:00:00+02:00"}`)
	f.Add(TypeOrderPlaced, int16(1), `{"version":1,"lines":[{"quantity":-3}],"customer":{"id":"x"}}`)
	f.Add(TypeOrderPlaced, int16(1), `{"lines":{"0":1},"customer":[]}`)
	f.Add("Nope", int16(1), `{}`)
	f.Add(TypeOrderShipped, int16(2), `null`)
	f.Fuzz(func(t *testing.T, eventType string, eventVersion int16, payload string) {
		aggregateType := AggregateOrder
		if len(eventType) >= 7 && eventType[:7] == "Product" {
			aggregateType = AggregateProduct
		}
		ev, err := Decode(Record{OutboxID: 1, AggregateType: aggregateType, AggregateID: 7, EventType: eventType, EventVersion: eventVersion, Payload: []byte(payload)})
		if err != nil {
			if ev != nil {
				t.Fatal("Decode returned both an event and an error")
			}
			return
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid event: %v", err)
		}
		if ev.AggregateID() != 7 || ev.AggregateType() != aggregateType || ev.EventType() != eventType {
			t.Fatalf("decoded %s %s %d, want %s %s 7", ev.EventType(), ev.AggregateType(), ev.AggregateID(), eventType, aggregateType)
		}
		again, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		ev2, err := Decode(Record{AggregateType: aggregateType, AggregateID: 7, EventType: eventType, EventVersion: ev.EventVersion(), Payload: again})
		if err != nil {
			t.Fatalf("re-decoding the current version failed: %v\n%s", err, again)
		}
		again2, _ := json.Marshal(ev2)
		if string(again) != string(again2) {
			t.Fatalf("round trip changed the event:\n%s\n%s", again, again2)
		}
	})
}
