package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	gsql "graphsync/sql"
)

// DeadLetter is one row of outbox_messages_dlq, as the admin commands show it.
type DeadLetter struct {
	ID             int64
	TenantID       int64
	AggregateType  string
	AggregateID    int64
	EventType      string
	EventVersion   int16
	Attempts       int16
	LastError      string
	TraceID        string
	OccurredAt     time.Time
	DeadLetteredAt time.Time
}

// DLQList returns up to limit dead letters in id order; tenantID 0 means all tenants.
func DLQList(ctx context.Context, pool *pgxpool.Pool, tenantID int64, limit int) ([]DeadLetter, error) {
	var tenant *int64
	if tenantID != 0 {
		tenant = &tenantID
	}
	rows, err := pool.Query(ctx, gsql.Query("DLQList"), tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("list DLQ: %w", err)
	}
	letters, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		// occurred_at may be ±infinity, one reason a row is dead-lettered;
		// time.Time cannot hold it: OccurredAt is then zero.
		var occurred pgtype.Timestamptz
		err := row.Scan(&d.ID, &d.TenantID, &d.AggregateType, &d.AggregateID, &d.EventType, &d.EventVersion,
			&d.Attempts, &d.LastError, &d.TraceID, &occurred, &d.DeadLetteredAt)
		d.OccurredAt = occurred.Time
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("list DLQ: %w", err)
	}
	return letters, nil
}

// DLQRetry moves dead letters back to the outbox as pending rows with a fresh
// attempt count, keeping their id; it returns the ids moved. tenantID, when
// not 0, limits it to that tenant's rows: another tenant's id is left alone,
// as one not in the DLQ.
func DLQRetry(ctx context.Context, pool *pgxpool.Pool, tenantID int64, ids []int64) ([]int64, error) {
	return collectIDs(ctx, pool, "DLQRetry", "retry dead letters", tenantID, ids)
}

// DLQDiscard deletes dead letters for good; it returns the ids deleted.
// tenantID, when not 0, limits it to that tenant's rows, as for DLQRetry.
func DLQDiscard(ctx context.Context, pool *pgxpool.Pool, tenantID int64, ids []int64) ([]int64, error) {
	return collectIDs(ctx, pool, "DLQDiscard", "discard dead letters", tenantID, ids)
}

func collectIDs(ctx context.Context, pool *pgxpool.Pool, query, what string, tenantID int64, ids []int64) ([]int64, error) {
	rows, err := pool.Query(ctx, gsql.Query(query), ids, tenantID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return done, nil
}

// NotifyTriggerEnable installs the statement-level trigger that sends the
// notify mode's wake-up hint on channel after each INSERT into
// outbox_messages. NOTIFY takes a database-wide lock at commit that
// serialises every notifying transaction, so it is opt-in: enable it only
// where the write rate allows, and prefer the stream mode for high rates.
func NotifyTriggerEnable(ctx context.Context, pool *pgxpool.Pool, channel string) error {
	if !validIdentifier(channel) {
		return fmt.Errorf("notify channel %q: use lower-case letters, digits and underscores (at most 63)", channel)
	}
	// Every start of a notify-mode relay calls this. Creating the trigger
	// locks outbox_messages against inserts (on PostgreSQL 13 against reads
	// too), and waits for every open transaction that holds a conflicting
	// lock while every new producer insert queues behind the wait: so the
	// trigger is created only when it is missing or names another channel,
	// and then gives up after notifyDDLLockTimeout.
	var installed bool
	if err := pool.QueryRow(ctx, gsql.Query("NotifyTriggerCurrent"), channel).Scan(&installed); err != nil {
		return fmt.Errorf("read the notify trigger on outbox_messages: %w", err)
	}
	if installed {
		return nil
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, gsql.Query("LockTimeoutSet"), notifyDDLLockTimeout); err != nil {
			return err
		}
		// CREATE OR REPLACE TRIGGER locks out writers only; PostgreSQL 13
		// has no such statement, and DROP TRIGGER locks out readers too.
		// A trigger's argument is DDL text, never a parameter: channel is a
		// checked identifier, written as a string literal.
		var replace bool
		if err := tx.QueryRow(ctx, gsql.Query("ServerVersionAtLeast14")).Scan(&replace); err != nil {
			return err
		}
		create := "CREATE OR REPLACE TRIGGER"
		if !replace {
			if _, err := tx.Exec(ctx, gsql.Query("NotifyTriggerDrop")); err != nil {
				return err
			}
			create = "CREATE TRIGGER"
		}
		_, err := tx.Exec(ctx, create+` graphsync_outbox_notify
			AFTER INSERT ON outbox_messages FOR EACH STATEMENT EXECUTE FUNCTION graphsync_outbox_notify('`+channel+`')`)
		return err
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return fmt.Errorf("install notify trigger on outbox_messages: gave up after %s waiting for a transaction that wrote to the outbox (producers would queue behind the wait); start again once it has ended", notifyDDLLockTimeout)
		}
		return fmt.Errorf("install notify trigger on outbox_messages: %w", err)
	}
	return nil
}

// notifyDDLLockTimeout bounds how long installing the notify trigger waits
// for outbox_messages' lock.
const notifyDDLLockTimeout = "5s"

// NotifyTriggerDisable drops the notify trigger. DROP TRIGGER locks
// outbox_messages against readers and writers, and waits for every open
// transaction that wrote to it while every producer's insert queues behind
// the wait: it gives up after notifyDDLLockTimeout, as installing does. No
// trigger, no lock.
func NotifyTriggerDisable(ctx context.Context, pool *pgxpool.Pool) error {
	var installed bool
	if err := pool.QueryRow(ctx, gsql.Query("NotifyTriggerExists")).Scan(&installed); err != nil {
		return fmt.Errorf("read the notify trigger on outbox_messages: %w", err)
	}
	if !installed {
		return nil
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, gsql.Query("LockTimeoutSet"), notifyDDLLockTimeout); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, gsql.Query("NotifyTriggerDrop"))
		return err
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return fmt.Errorf("drop notify trigger: gave up after %s waiting for a transaction that wrote to the outbox (producers would queue behind the wait); start again once it has ended", notifyDDLLockTimeout)
		}
		return fmt.Errorf("drop notify trigger: %w", err)
	}
	return nil
}
