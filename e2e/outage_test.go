package e2e

import (
	"net/http"
	"time"

	"graphsync/internal/stacktest"
	"graphsync/workload"
)

const (
	// outageWindow is how long the tests watch the relays with Neo4j down.
	outageWindow = 5 * time.Second
	// recoverTimeout bounds getting back to work after an outage: the relay's
	// backoff grows to 30s while a service is down.
	recoverTimeout = 2 * time.Minute
)

// plantPoison writes n poison rows into tenantID's outbox.
func (s *stack) plantPoison(tenantID int64, n int) []int64 {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	ids, err := workload.PlantPoison(ctx, s.pool, tenantID, n)
	if err != nil {
		s.t.Fatalf("plant poison in tenant %d: %v", tenantID, err)
	}
	s.logf("planted poison outbox ids %v in tenant %d", ids, tenantID)
	return ids
}

// waitFirstTenant waits until the writer created a tenant with a product.
func (s *stack) waitFirstTenant() int64 {
	s.t.Helper()
	var tenantID int64
	waitUntil(s.t, time.Minute, "the workload's first tenant", func() (bool, string) {
		ctx, cancel := queryCtx()
		defer cancel()
		err := s.pool.QueryRow(ctx, `SELECT tenant_id FROM products ORDER BY id LIMIT 1`).Scan(&tenantID)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return tenantID
}

// lastTenant returns the newest tenant with a product.
func (s *stack) lastTenant() int64 {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	var tenantID int64
	if err := s.pool.QueryRow(ctx, `SELECT tenant_id FROM products ORDER BY id DESC LIMIT 1`).Scan(&tenantID); err != nil {
		s.t.Fatalf("newest tenant: %v", err)
	}
	return tenantID
}

// neo4jOutage stops Neo4j, watches the relays for outageWindow and starts
// it again. While it is down, every relay's /readyz must answer 503 and no
// row may become processed unless it was in a batch in flight when Neo4j
// went away: such a batch may have committed in Neo4j just before and be
// marked just after, but no other row can have been applied.
func (s *stack) neo4jOutage(relays ...*syncProc) {
	t := s.t
	t.Helper()
	stacktest.StopNeo4j(t)
	s.neo4jDown = true
	stoppedAt := time.Now()

	ctx, cancel := queryCtx()
	var processedAtStop, pendingAtStop int64
	var inFlight []int64
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE processed_at IS NOT NULL),
		       count(*) FILTER (WHERE processed_at IS NULL),
		       coalesce(array_agg(id) FILTER (WHERE processed_at IS NULL
		         AND id IN (SELECT unnest(b.ids) FROM outbox_batches b)), '{}')
		FROM outbox_messages`).Scan(&processedAtStop, &pendingAtStop, &inFlight)
	cancel()
	if err != nil {
		t.Fatalf("outbox at the Neo4j stop: %v", err)
	}
	for _, p := range relays {
		p.waitReadyz(t, http.StatusServiceUnavailable, 15*time.Second)
	}

	var markedInFlight, pendingAtEnd int64
	check := func() (bool, string) {
		for _, p := range relays {
			if status, body := p.readyz(); status != http.StatusServiceUnavailable {
				t.Fatalf("%s: /readyz answered %d with Neo4j down, want 503: %s", p.name, status, body)
			}
		}
		ctx, cancel := queryCtx()
		defer cancel()
		var processed int64
		err := s.pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE processed_at IS NOT NULL),
			       count(*) FILTER (WHERE processed_at IS NOT NULL AND id = ANY($1)),
			       count(*) FILTER (WHERE processed_at IS NULL)
			FROM outbox_messages`, inFlight).Scan(&processed, &markedInFlight, &pendingAtEnd)
		if err != nil {
			t.Fatalf("outbox during the Neo4j outage: %v", err)
		}
		if marked := processed - processedAtStop - markedInFlight; marked > 0 {
			t.Fatalf("%d rows not in flight when Neo4j stopped were marked processed while it was down", marked)
		}
		return false, ""
	}
	watchFor(outageWindow, check)
	if pendingAtEnd <= pendingAtStop {
		t.Fatalf("no new rows waited during the Neo4j outage (%d pending at the stop, %d at the end): the workload stopped writing?",
			pendingAtStop, pendingAtEnd)
	}
	s.logf("Neo4j down for %s: %d rows were in flight at the stop (%d of them marked, committed before it); pending grew from %d to %d; /readyz 503 throughout",
		time.Since(stoppedAt).Round(100*time.Millisecond), len(inFlight), markedInFlight, pendingAtStop, pendingAtEnd)

	stacktest.StartNeo4j(t)
	s.neo4jDown = false
	restartedAt := time.Now()
	for _, p := range relays {
		p.waitReadyz(t, http.StatusOK, recoverTimeout)
	}
	s.waitProcessedBeyond(processedAtStop+markedInFlight, recoverTimeout, "the relay to deliver again after Neo4j came back")
	s.logf("relaying again %s after Neo4j came back", time.Since(restartedAt).Round(100*time.Millisecond))
}

// watchFor calls check every tick for d, or until it reports true.
func watchFor(d time.Duration, check func() (bool, string)) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		if done, _ := check(); done {
			return
		}
		select {
		case <-deadline.C:
			return
		case <-ticker.C:
		}
	}
}

// postgresRestart restarts PostgreSQL while the writer writes. Every relay
// must survive it, answer /readyz 200 again and deliver the writes made
// after it; in stream mode its slot must be streamed from again (active,
// and confirmed past the WAL written after the restart).
func (s *stack) postgresRestart(w *writer, wake string, relays ...*syncProc) {
	t := s.t
	t.Helper()
	w.restartBegin()
	s.pgRestarting = true
	stacktest.RestartPostgres(t)
	s.pgRestarting = false
	// The pool's connections died with the server.
	s.pool.Reset()
	w.restartEnd()
	restartedAt := time.Now()
	processed := s.mustCounts().processed
	for _, p := range relays {
		if !p.running() {
			t.Fatalf("%s exited on the PostgreSQL restart: %s", p.name, p.exitDescription())
		}
		p.waitReadyz(t, http.StatusOK, recoverTimeout)
	}
	s.waitProcessedBeyond(processed, recoverTimeout, "the relay to deliver new writes after the PostgreSQL restart")
	s.logf("relaying again %s after PostgreSQL came back", time.Since(restartedAt).Round(100*time.Millisecond))
	if wake != "stream" {
		return
	}
	slot := "gs_e2e_" + s.suffix
	ctx, cancel := queryCtx()
	var walAfter string
	err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&walAfter)
	cancel()
	if err != nil {
		t.Fatalf("current WAL position: %v", err)
	}
	waitUntil(t, recoverTimeout, "the stream to resume slot "+slot, func() (bool, string) {
		ctx, cancel := queryCtx()
		defer cancel()
		var active, caughtUp bool
		var confirmed string
		err := s.pool.QueryRow(ctx, `
			SELECT active, coalesce(confirmed_flush_lsn::text, ''), coalesce(confirmed_flush_lsn >= $2::pg_lsn, false)
			FROM pg_replication_slots WHERE slot_name = $1`, slot, walAfter).Scan(&active, &confirmed, &caughtUp)
		if err != nil {
			return false, err.Error()
		}
		return active && caughtUp, "active=" + boolString(active) + ", confirmed " + confirmed + ", want past " + walAfter
	})
	s.logf("slot %s streamed again and confirmed past %s", slot, walAfter)
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
