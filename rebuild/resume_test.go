package rebuild

import (
	"context"
	"strings"
	"testing"

	"graphsync/workload"
)

// An unfinished rebuild is resumed only while it is recent: one that
// started longer ago than ResumeWithin, or any with Restart, is started
// anew, and the result says which and why.
func TestOldOrRestartedCheckpointsStartAnew(t *testing.T) {
	pool, driver := stack(t)
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 71, Tenants: 1, Orders: 60, DeleteEvery: -1})[0]
	// stopAfterOneChunk leaves an unfinished snapshot rebuild of the
	// tenant: cancelled once its first chunk is stored.
	stopAfterOneChunk := func() {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := runScope(ctx, t, pool, driver, Config{TenantID: tenant, Source: SourceSnapshot, ChunkSize: 10,
			Progress: func(p Progress) {
				if p.Phase == "snapshot" && p.Chunks >= 1 {
					cancel()
				}
			}})
		if err == nil {
			t.Fatal("the rebuild finished: nothing is left to resume")
		}
		if n := count(t, pool, `SELECT count(*) FROM rebuild_checkpoints WHERE scope_tenant_id = $1 AND finished_at IS NULL AND chunks >= 1`, tenant); n != 1 {
			t.Fatalf("%d unfinished checkpoints of tenant %d after the stop, want 1", n, tenant)
		}
	}

	stopAfterOneChunk()
	if res := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceSnapshot}); !res.Resumed ||
		!strings.HasPrefix(res.Why, "resuming the snapshot rebuild started") {
		t.Errorf("a recent unfinished rebuild was not resumed: resumed %v, %q", res.Resumed, res.Why)
	}

	stopAfterOneChunk()
	if _, err := pool.Exec(context.Background(), `UPDATE rebuild_checkpoints SET started_at = now() - interval '49 hours'
		WHERE scope_tenant_id = $1`, tenant); err != nil {
		t.Fatal(err)
	}
	res := rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceSnapshot})
	if res.Resumed || !strings.Contains(res.Why, "started anew, not resuming the unfinished snapshot rebuild started") ||
		!strings.Contains(res.Why, "older than 24h0m0s (--resume-within)") {
		t.Errorf("a 49-hour-old unfinished rebuild: resumed %v, %q", res.Resumed, res.Why)
	}
	requireNoDrift(t, res, "the rebuild started anew")

	stopAfterOneChunk()
	res = rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceSnapshot, Restart: true})
	if res.Resumed || !strings.Contains(res.Why, "started anew (--restart), not resuming the unfinished snapshot rebuild") {
		t.Errorf("--restart: resumed %v, %q", res.Resumed, res.Why)
	}
	requireNoDrift(t, res, "--restart")
}
