package e2e

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/workload"
)

// shutdownWorkload is the backlog the shutdown tests start the relay on.
var shutdownWorkload = workload.Config{Tenants: 1, Orders: 100, Writers: 2}

// TestShutdown stops a relay whose batch is in flight. To hold a batch in
// flight for as long as the test needs, the test's own Neo4j transaction
// creates the (not yet projected) tenant's node and keeps it uncommitted:
// the relay's first write merges that node and waits on the uniqueness lock
// until the test rolls back.
//
//   - graceful: SIGTERM, the process keeps running while its batch is
//     blocked, the test releases the lock, the batch commits and is marked,
//     and the process exits 0 within the drain timeout having claimed nothing
//     more.
//   - second signal: SIGTERM then SIGTERM again while the batch is blocked:
//     the process exits at once, non-zero, with nothing marked.
//
// Either way a new relay then catches up and the graph must match PostgreSQL.
func TestShutdown(t *testing.T) {
	t.Run("graceful", func(t *testing.T) {
		s, tenantID, committed := newBacklog(t)
		lock := s.holdTenantNode(tenantID)
		p := s.startSync("graceful", nil, append(s.syncArgs("poll"), "--drain-timeout", "20s")...)
		leased := s.waitBlockedInFlight(p)

		p.signal(termSignal)
		termAt := time.Now()
		s.logf("SIGTERM sent to %s with %d rows in flight", p.name, len(leased))
		s.expectStillRunning(p, 1500*time.Millisecond, "with its batch still in flight after SIGTERM (drain timeout 20s)")
		lock.release()
		code, ok := p.waitExit(25 * time.Second)
		if !ok || code != 0 {
			t.Fatalf("%s after SIGTERM and the batch's release: exited %v with code %d; want exit 0 within the drain timeout", p.name, ok, code)
		}
		if elapsed := time.Since(termAt); elapsed > 20*time.Second {
			t.Errorf("%s took %s to stop after SIGTERM, more than its drain timeout (20s)", p.name, elapsed)
		}
		s.logf("%s exited 0 %s after SIGTERM", p.name, time.Since(termAt).Round(10*time.Millisecond))

		// The batch in delivery was finished and marked, and nothing else was
		// claimed after the signal. The rows leased at SIGTERM are that batch
		// and, when the relay had claimed the next one ahead (poll claims
		// while Neo4j applies), that one too: a stopping relay hands it back
		// unstarted and uncounted.
		processed := s.processedIDs()
		slices.Sort(leased)
		if len(processed) == 0 {
			t.Fatalf("after the graceful stop nothing was processed; want the batch in delivery at SIGTERM (of %v)", leased)
		}
		for _, id := range processed {
			if _, found := slices.BinarySearch(leased, id); !found {
				t.Fatalf("after the graceful stop, row %d is processed but was not leased at SIGTERM (leased: %v; processed: %v)", id, leased, processed)
			}
		}
		ctx, cancel := queryCtx()
		defer cancel()
		var counted int64
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND processed_at IS NULL AND attempts <> 0`,
			leased).Scan(&counted); err != nil {
			t.Fatal(err)
		}
		if counted != 0 {
			t.Fatalf("%d rows leased at SIGTERM but not delivered kept a counted attempt; a stopping relay hands them back uncounted", counted)
		}
		if n := s.leasedBy(p.relayID); n != 0 {
			t.Fatalf("%d rows are still leased by %s after its graceful stop", n, p.relayID)
		}
		s.checkMarkedWereApplied("after the graceful stop")
		s.catchUpAndCheck(committed)
	})

	t.Run("second signal", func(t *testing.T) {
		s, tenantID, committed := newBacklog(t)
		lock := s.holdTenantNode(tenantID)
		p := s.startSync("twice", nil, append(s.syncArgs("poll"), "--drain-timeout", "60s")...)
		leased := s.waitBlockedInFlight(p)

		p.signal(termSignal)
		s.expectStillRunning(p, time.Second, "with its batch still in flight after SIGTERM (drain timeout 60s)")
		// The relay claims the next batch while Neo4j applies the blocked
		// one, so the rows it abandons are those leased at the second
		// signal: the blocked batch and the one claimed ahead, which may
		// have come after the first look.
		abandoned := s.leasedIDs(p.relayID)
		for _, id := range leased {
			if _, found := slices.BinarySearch(abandoned, id); !found {
				t.Fatalf("row %d of the blocked batch is no longer leased by %s before the second signal (leased: %v)", id, p.relayID, abandoned)
			}
		}
		p.signal(termSignal)
		secondAt := time.Now()
		code, ok := p.waitExit(3 * time.Second)
		if !ok {
			t.Fatalf("%s still running 3s after a second SIGTERM; want it to stop at once", p.name)
		}
		if code == 0 {
			t.Errorf("%s exited 0 on a second signal with its batch abandoned; want a non-zero exit", p.name)
		}
		s.logf("%s exited %d %s after the second SIGTERM", p.name, code, time.Since(secondAt).Round(10*time.Millisecond))
		lock.release()

		if processed := s.processedIDs(); len(processed) != 0 {
			t.Fatalf("rows %v were marked processed although their batch never committed", processed)
		}
		if after := s.leasedIDs(p.relayID); !slices.Equal(after, abandoned) {
			t.Errorf("rows %v leased by %s after it stopped; want the %d rows it held at the second signal, %v (their lease runs out)", after, p.relayID, len(abandoned), abandoned)
		}
		s.catchUpAndCheck(committed)
	})
}

// newBacklog returns a stack whose outbox holds shutdownWorkload's events,
// not yet relayed, with the tenant they belong to and their number.
func newBacklog(t *testing.T) (*stack, int64, int64) {
	s := newStack(t)
	s.migrate()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	report, err := workload.Run(ctx, s.pool, shutdownWorkload, nil)
	if err != nil {
		t.Fatalf("write the backlog: %v", err)
	}
	s.logf("backlog: %d events in tenant %d", report.Events, report.TenantIDs[0])
	return s, report.TenantIDs[0], report.Events
}

// graphLock is an open Neo4j transaction holding a lock.
type graphLock struct {
	s       *stack
	session neo4j.SessionWithContext
	tx      neo4j.ExplicitTransaction
	open    bool
}

// holdTenantNode creates tenantID's (:Tenant) node in a transaction it keeps
// open until release, so any write merging that node waits.
func (s *stack) holdTenantNode(tenantID int64) *graphLock {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	session := s.neo4j.NewSession(context.Background(), neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	tx, err := session.BeginTransaction(ctx)
	if err != nil {
		session.Close(context.Background())
		s.t.Fatalf("begin the locking transaction: %v", err)
	}
	result, err := tx.Run(ctx, `CREATE (:Tenant {tenant_id: $tenantID, id: $tenantID})`, map[string]any{"tenantID": tenantID})
	if err == nil {
		_, err = result.Consume(ctx)
	}
	if err != nil {
		tx.Rollback(ctx) //nolint:errcheck // failing anyway
		session.Close(context.Background())
		s.t.Fatalf("create the tenant node to hold its lock: %v", err)
	}
	l := &graphLock{s: s, session: session, tx: tx, open: true}
	s.t.Cleanup(l.release)
	return l
}

// release rolls the locking transaction back: the graph is as before.
func (l *graphLock) release() {
	if !l.open {
		return
	}
	l.open = false
	ctx, cancel := queryCtx()
	defer cancel()
	if err := l.tx.Rollback(ctx); err != nil {
		l.s.t.Errorf("roll back the locking transaction: %v", err)
	}
	l.session.Close(ctx)
	l.s.logf("released the tenant node lock")
}

// waitBlockedInFlight waits until p holds a leased batch and returns its ids,
// checking that nothing is processed (the batch is blocked, not done).
func (s *stack) waitBlockedInFlight(p *syncProc) []int64 {
	s.t.Helper()
	p.waitReadyz(s.t, http.StatusOK, startTimeout)
	var leased []int64
	waitUntil(s.t, startTimeout, p.name+" to claim a batch", func() (bool, string) {
		var err error
		if leased, err = s.queryLeasedIDs(p.relayID); err != nil {
			return false, err.Error()
		}
		return len(leased) > 0, "no row leased yet"
	})
	if processed := s.processedIDs(); len(processed) != 0 {
		s.t.Fatalf("rows %v were processed although the tenant node was locked", processed)
	}
	return leased
}

// leasedIDs lists, in order, the pending rows in relayID's batches (in
// flight, or left by its death until a claim takes them over).
func (s *stack) leasedIDs(relayID string) []int64 {
	s.t.Helper()
	ids, err := s.queryLeasedIDs(relayID)
	if err != nil {
		s.t.Fatalf("rows leased by %s: %v", relayID, err)
	}
	return ids
}

func (s *stack) queryLeasedIDs(relayID string) ([]int64, error) {
	ctx, cancel := queryCtx()
	defer cancel()
	// A batch in flight is a row of outbox_batches (docs/adr/0018), until
	// its settle ends it or, its lease run out, a claim takes it over.
	rows, err := s.pool.Query(ctx, `SELECT m.id FROM outbox_messages m
		WHERE m.processed_at IS NULL
		  AND EXISTS (SELECT 1 FROM outbox_batches b WHERE m.id = ANY(b.ids) AND split_part(b.holder, '/', 1) = $1)
		ORDER BY m.id`, relayID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// expectStillRunning fails the test if p exits within d.
func (s *stack) expectStillRunning(p *syncProc, d time.Duration, why string) {
	s.t.Helper()
	if code, exited := p.waitExit(d); exited {
		s.t.Fatalf("%s exited (code %d) %s", p.name, code, why)
	}
}

// processedIDs lists the processed outbox ids.
func (s *stack) processedIDs() []int64 {
	s.t.Helper()
	ctx, cancel := queryCtx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id FROM outbox_messages WHERE processed_at IS NOT NULL ORDER BY id`)
	if err != nil {
		s.t.Fatalf("processed rows: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		s.t.Fatalf("processed rows: %v", err)
	}
	return ids
}

// leasedBy counts the unprocessed rows relayID holds a lease on (or held
// one on, if it ran out).
func (s *stack) leasedBy(relayID string) int64 {
	s.t.Helper()
	return int64(len(s.leasedIDs(relayID)))
}

// catchUpAndCheck starts a new relay, waits until it has relayed
// everything, stops it with SIGTERM and runs the final checks.
func (s *stack) catchUpAndCheck(committed int64) {
	s.t.Helper()
	p := s.startSync("after", nil, s.syncArgs("poll")...)
	s.waitCaughtUp()
	p.signal(termSignal)
	if code, ok := p.waitExit(exitTimeout); !ok || code != 0 {
		s.t.Errorf("%s after SIGTERM: exited %v with code %d; want 0", p.name, ok, code)
	}
	s.checkFinal(nil, committed, 0)
}
