package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"graphsync/workload"
)

// chaosWorkload is one writer round: three new tenants, three concurrent
// writers, about 1,200 events. Rounds repeat while a scenario runs, paced by
// chaosQueryEvery to some 60-70 events a second (an event's transaction
// takes about five queries).
var chaosWorkload = workload.Config{
	Tenants:             3,
	CategoriesPerTenant: 4,
	ProductsPerTenant:   20,
	CustomersPerTenant:  10,
	Orders:              400,
	Writers:             3,
}

const chaosQueryEvery = 3 * time.Millisecond

// TestChaos runs, for each wake mode, one scenario while the workload
// generator writes: SIGKILL the relay and restart it, twice; run two relays
// at once and SIGKILL, twice, one holding a batch while the other runs;
// stop Neo4j for a while (/readyz must answer 503 and nothing may be marked
// processed); restart PostgreSQL (the relay must reconnect, and in stream
// mode resume its slot); plant poison events. Then,
// caught up, the graph must equal what PostgreSQL says, no event may be
// lost, the DLQ must hold exactly the poison, no personal data may be in the
// graph and no relationship may cross tenants.
func TestChaos(t *testing.T) {
	for _, wake := range []string{"poll", "notify", "stream"} {
		t.Run(wake, func(t *testing.T) { runChaos(t, wake) })
	}
}

func runChaos(t *testing.T, wake string) {
	s := newStack(t)
	s.migrate()
	args := s.syncArgs(wake)
	a := s.startSync("a", nil, args...)
	a.waitReadyz(t, http.StatusOK, startTimeout)

	w := s.startWriter(chaosWorkload, chaosQueryEvery)
	poison := s.plantPoison(s.waitFirstTenant(), len(workload.PoisonKinds))

	// A relay killed in the middle of its work, twice, and started again.
	var killedInFlight int64
	for i := range 2 {
		s.waitProcessedBeyond(s.mustCounts().processed+150, time.Minute, "the relay to make progress before SIGKILL")
		_, n := s.killInFlight(a)
		killedInFlight += n
		s.checkMarkedWereApplied(fmt.Sprintf("after SIGKILL %d", i+1))
		a = s.startSync("a", nil, args...)
	}

	// Two relays at once; each kill hits a relay holding a batch while the
	// other runs. In stream mode only the relay holding the slot claims
	// (the other serves the fallback poll, which the stream leaves next to
	// nothing), so the kill goes to whichever holds a batch: a if it does
	// the first time, b the second. The survivor carries on alone as a.
	b := s.startSync("b", nil, args...)
	b.waitReadyz(t, http.StatusOK, startTimeout)
	s.waitProcessedBeyond(s.mustCounts().processed+300, time.Minute, "progress with two relays")
	victim, n := s.killInFlight(a, b)
	killedInFlight += n
	s.checkMarkedWereApplied("after SIGKILL of " + victim.name + " with another relay running")
	if victim == a {
		a = s.startSync("a", nil, args...)
		a.waitReadyz(t, http.StatusOK, startTimeout)
	} else {
		b = s.startSync("b", nil, args...)
		b.waitReadyz(t, http.StatusOK, startTimeout)
	}
	s.waitProcessedBeyond(s.mustCounts().processed+150, time.Minute, "progress with two relays")
	for _, p := range []*syncProc{a, b} {
		if n, err := p.metric("outbox_throughput"); err == nil {
			s.logf("%s has marked %.0f rows processed", p.name, n)
		}
	}
	victim, n = s.killInFlight(b, a)
	killedInFlight += n
	s.checkMarkedWereApplied("after SIGKILL of " + victim.name + " with another relay running")
	if victim == a {
		a = b
	}
	if killedInFlight == 0 {
		t.Errorf("no SIGKILL hit a relay with a batch in flight")
	}

	s.neo4jOutage(a)
	poison = append(poison, s.plantPoison(s.lastTenant(), 2)...)
	s.postgresRestart(w, wake, a)
	if err := w.err(); err != nil {
		t.Fatalf("workload round failed: %v", err)
	}
	s.waitProcessedBeyond(s.mustCounts().processed+150, time.Minute, "progress after the outages")

	committed, uncertain := w.finish()
	s.waitCaughtUp()
	a.signal(termSignal)
	if code, ok := a.waitExit(exitTimeout); !ok || code != 0 {
		t.Errorf("%s after SIGTERM: exited %v, code %d; want exit 0 within %s", a.name, ok, code, exitTimeout)
	}
	s.checkFinal(poison, committed, uncertain)
}
