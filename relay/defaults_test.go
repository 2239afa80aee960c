package relay

import (
	"reflect"
	"testing"
	"time"
)

// TestDefaultsFillEveryZeroField: a zero Config gets every static default
// from DefaultConfig, and the derived ones from their rules; a set field
// keeps its value.
func TestDefaultsFillEveryZeroField(t *testing.T) {
	got := Config{}.withDefaults()
	want := DefaultConfig()
	want.ID, want.BacklogBatchSize, want.DependencyWaitMax = got.ID, 4*want.BatchSize, time.Minute
	if got.ID == "" {
		t.Fatal("no relay id")
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("zero Config with defaults = %+v, want %+v", got, want)
	}
	set := Config{BatchSize: 7, Slot: "mine"}.withDefaults()
	if set.BatchSize != 7 || set.Slot != "mine" || set.BacklogBatchSize != 28 {
		t.Fatalf("set fields changed: %+v", set)
	}
	if r := (RetentionConfig{}).withDefaults(); r != DefaultRetentionConfig() {
		t.Fatalf("zero RetentionConfig with defaults = %+v, want %+v", r, DefaultRetentionConfig())
	}
}
