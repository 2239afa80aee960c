package retrieve

import (
	"context"
	"errors"
	"strings"
	"testing"

	"graphsync/graphmodel"
)

func TestParseNodeKey(t *testing.T) {
	m := &graphmodel.Default
	for key, want := range map[string]string{"Product:15": "Product", " Category:3 ": "Category", "Order:42": "Order"} {
		label, id, err := ParseNodeKey(m, key)
		if err != nil || label.Name != want || id <= 0 {
			t.Errorf("%q: %s %d %v", key, label.Name, id, err)
		}
	}
	for _, key := range []string{"Customer:5", "Tenant:1", "DeletedProduct:1", "product:15", "Product", "Product:", ":15",
		"Product:0", "Product:-1", "Product:1.5", "Product:1 OR 1=1", "Product:99999999999999999999", "`Product`:1", "Product:1:2"} {
		if _, _, err := ParseNodeKey(m, key); !errors.Is(err, ErrBadKey) {
			t.Errorf("%q: err %v, want ErrBadKey", key, err)
		}
	}
	if got := strings.Join(LookupLabels(m), ","); got != "Category,Product,Order" {
		t.Errorf("lookup labels %s: customers are only counted, the tenant node holds nothing", got)
	}
}

// RetrieveWith refuses settings out of bounds before it reads anything: the
// Retriever has no driver here, and any read would panic.
func TestRetrieveWithBounds(t *testing.T) {
	r, err := New(nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{TopK: MaxTopK + 1}, {TopK: -1}, {Hops: MaxHops + 1}, {MaxChars: MinMaxChars - 1}, {MaxChars: -5}} {
		if _, err := r.RetrieveWith(context.Background(), 1, "kettle", opts); err == nil || !strings.Contains(err.Error(), "retrieve options") {
			t.Errorf("%+v: err %v", opts, err)
		}
	}
}
