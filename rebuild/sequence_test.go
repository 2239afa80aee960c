package rebuild

import (
	"context"
	"errors"
	"strings"
	"testing"

	"graphsync/workload"
)

// A snapshot refuses to start when the outbox id sequence caches ids per
// session (CACHE above 1): its reference-node watermark would then let a
// chunk stamp a category or customer above events that still come, and
// sync would drop them. The error names the setting and the way out.
func TestSnapshotRefusesACachedOutboxSequence(t *testing.T) {
	pool, driver := stack(t)
	ctx := context.Background()
	tenant := writeWorkload(t, pool, driver, workload.Config{Seed: 73, Tenants: 1, Orders: 5, DeleteEvery: -1})[0]
	if _, err := pool.Exec(ctx, `ALTER TABLE outbox_messages ALTER COLUMN id SET CACHE 20`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `ALTER TABLE outbox_messages ALTER COLUMN id SET CACHE 1`); err != nil {
			t.Error(err)
		}
	})
	_, err := runScope(ctx, t, pool, driver, Config{TenantID: tenant, Source: SourceSnapshot})
	if !errors.Is(err, ErrSequenceCached) || !strings.Contains(err.Error(), "CACHE 20") || !strings.Contains(err.Error(), "SET CACHE 1") {
		t.Fatalf("a snapshot with the outbox sequence at CACHE 20: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM rebuild_checkpoints WHERE scope_tenant_id = $1 AND finished_at IS NULL`, tenant); n != 0 {
		t.Errorf("the refused snapshot left %d unfinished checkpoints", n)
	}
	// A replay reads no watermark: it runs.
	requireNoDrift(t, rebuildScope(t, pool, driver, Config{TenantID: tenant, Source: SourceReplay}), "replay beside CACHE 20")
}
