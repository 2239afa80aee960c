package events

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestEveryKindDecodesItsSample: each registered kind's sample is valid,
// decodes back to itself with the id filled from aggregate_id, and is what
// Current reports.
func TestEveryKindDecodesItsSample(t *testing.T) {
	kinds := Kinds()
	if len(kinds) != len(catalog) || len(kinds) == 0 {
		t.Fatalf("Kinds() lists %d kinds, the catalog has %d", len(kinds), len(catalog))
	}
	for _, k := range kinds {
		t.Run(k.EventType, func(t *testing.T) {
			if k.Sample.EventType() != k.EventType || k.Sample.AggregateType() != k.AggregateType {
				t.Fatalf("sample is %s/%s, registered as %s/%s", k.Sample.AggregateType(), k.Sample.EventType(), k.AggregateType, k.EventType)
			}
			if current, ok := Current(k.EventType); !ok || current != k.Version {
				t.Fatalf("Current(%s) = %d, %v; want %d", k.EventType, current, ok, k.Version)
			}
			// The payload leaves the id out: decode fills it from aggregate_id.
			doc := map[string]any{}
			raw, err := json.Marshal(k.Sample)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			delete(doc, "id")
			payload, _ := json.Marshal(doc)
			got, err := Decode(Record{AggregateType: k.AggregateType, AggregateID: k.Sample.AggregateID(),
				EventType: k.EventType, EventVersion: k.Version, Payload: payload})
			if err != nil {
				t.Fatalf("sample does not decode: %v", err)
			}
			if !reflect.DeepEqual(got, k.Sample) {
				t.Fatalf("decoded %#v, want the sample %#v", got, k.Sample)
			}
		})
	}
}

// TestEveryEventTypeConstantIsRegistered: the Type constants producers use
// name registered kinds.
func TestEveryEventTypeConstantIsRegistered(t *testing.T) {
	for _, eventType := range []string{TypeProductCreated, TypeProductUpdated, TypeProductPriceChanged, TypeProductDiscontinued,
		TypeProductDeleted, TypeOrderPlaced, TypeOrderConfirmed, TypeOrderShipped, TypeOrderCancelled} {
		if _, ok := catalog[eventType]; !ok {
			t.Errorf("%s is not registered", eventType)
		}
	}
}
