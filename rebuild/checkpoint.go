package rebuild

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

const (
	phaseBase  = "base"
	phaseSweep = "sweep"
	phaseDone  = "done"
)

// checkpoint is a rebuild's position, one row per scope in
// rebuild_checkpoints, stored after every chunk it wrote.
type checkpoint struct {
	scope     int64
	source    Source
	phase     string
	tenantID  int64
	label     string
	afterID   int64
	replayXID string
	replayID  int64
	done      int64
	chunks    int64
	startedAt time.Time
}

// loadCheckpoint returns the unfinished rebuild of scope, if there is one.
func loadCheckpoint(ctx context.Context, pool *pgxpool.Pool, scope int64) (*checkpoint, bool, error) {
	cp := &checkpoint{scope: scope}
	var source string
	err := pool.QueryRow(ctx, gsql.Query("RebuildCheckpointLoad"), scope).Scan(&source, &cp.phase, &cp.tenantID, &cp.label,
		&cp.afterID, &cp.replayXID, &cp.replayID, &cp.done, &cp.chunks, &cp.startedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the rebuild checkpoint: %w", err)
	}
	cp.source = Source(source)
	return cp, true, nil
}

// startCheckpoint starts a rebuild of scope from the beginning.
func startCheckpoint(ctx context.Context, pool *pgxpool.Pool, scope int64, source Source) (*checkpoint, error) {
	if _, err := pool.Exec(ctx, gsql.Query("RebuildCheckpointStart"), scope, string(source)); err != nil {
		return nil, fmt.Errorf("start the rebuild checkpoint: %w", err)
	}
	return &checkpoint{scope: scope, source: source, phase: phaseBase, replayXID: "0", startedAt: time.Now()}, nil
}

func (cp *checkpoint) store(ctx context.Context, pool *pgxpool.Pool) error {
	// The position must be stored even when ctx was cancelled right after
	// the chunk was written.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, gsql.Query("RebuildCheckpointStore"), cp.scope, cp.phase, cp.tenantID, cp.label, cp.afterID,
		cp.replayXID, cp.replayID, cp.done, cp.chunks); err != nil {
		return fmt.Errorf("store the rebuild checkpoint: %w", err)
	}
	return nil
}

// lockScope takes the scope's advisory lock on a connection of its own, held
// until unlock: a rebuild of every tenant excludes any other rebuild; a
// rebuild of one tenant excludes a rebuild of every tenant and of that
// tenant. A killed rebuild's connection closes and its lock goes with it.
func lockScope(ctx context.Context, pool *pgxpool.Pool, tenant int64) (unlock func(), err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock the rebuild scope: %w", err)
	}
	release := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, gsql.Query("RebuildUnlockAll")); err != nil {
			conn.Conn().Close(ctx) //nolint:errcheck // a closed session holds no lock
		}
		conn.Release()
	}
	var got bool
	if tenant == 0 {
		err = conn.QueryRow(ctx, gsql.Query("RebuildLockAll")).Scan(&got)
	} else {
		err = conn.QueryRow(ctx, gsql.Query("RebuildLockTenant"), tenant).Scan(&got)
	}
	if err != nil {
		release()
		return nil, fmt.Errorf("lock the rebuild scope: %w", err)
	}
	if !got {
		release()
		if tenant == 0 {
			return nil, fmt.Errorf("%w: a rebuild of every tenant or of one tenant holds the lock; wait for it or stop it (it resumes later)", ErrBusy)
		}
		return nil, fmt.Errorf("%w: a rebuild of tenant %d or of every tenant holds the lock; wait for it or stop it (it resumes later)", ErrBusy, tenant)
	}
	return release, nil
}
