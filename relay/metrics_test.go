package relay

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// outbox_failures' event_type is producer text: a producer that writes a
// new type per event must not grow the metric without end, and a type that
// is not valid UTF-8 (a SQL_ASCII database) must not panic the service.
func TestFailureLabelsAreBounded(t *testing.T) {
	m := NewMetrics()
	m.failed("OrderPlaced")
	m.failed("bad \xff\xfe type")
	for i := range 3 * maxEventTypeLabels {
		m.failed(fmt.Sprintf("OrderPlaced-%d-%0200d", i, i))
	}
	m.failed("OrderPlaced")
	if n := testutil.CollectAndCount(m.failures); n != maxEventTypeLabels+1 {
		t.Errorf("outbox_failures has %d series, want %d (the bound and other)", n, maxEventTypeLabels+1)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("OrderPlaced")); got != 2 {
		t.Errorf("OrderPlaced failures = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("other")); got != 2*maxEventTypeLabels+2 {
		t.Errorf("other = %v, want %d", got, 2*maxEventTypeLabels+2)
	}
}
