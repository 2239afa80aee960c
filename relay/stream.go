package relay

import (
	"graphsync/redact"
	gsql "graphsync/sql"

	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// ErrWALLevel is returned when PostgreSQL cannot do logical replication.
var ErrWALLevel = errors.New("PostgreSQL runs with wal_level below logical: set wal_level=logical and restart it, or use --wake=poll or notify")

// streamer follows outbox inserts through logical replication (pgoutput) and
// hands each committed transaction's row ids to the relay's stream worker, in
// commit order. The slot's confirmed position advances only past
// transactions whose rows the worker delivered and marked; while nothing is in
// flight it follows the server's WAL end, so a quiet outbox on a busy database
// does not pin WAL.
type streamer struct {
	r      *Relay
	out    chan<- streamBatch
	log    *zap.Logger
	config *pgconn.Config
	// current is the session of the open replication connection, if any.
	current atomic.Pointer[streamSession]
}

// errStreamStalled ends a replication connection whose transactions could
// not be delivered for StreamStallTimeout (PostgreSQL refusing connections
// during a shutdown, say). A shutting-down server waits for its walsender,
// which waits for our confirmation, so holding on would block the shutdown;
// the slot re-sends from the confirmed position on the next connection.
var errStreamStalled = errors.New("replication stream stalled: its transactions could not be delivered")

// streamSession is the bookkeeping of one replication connection. Batches
// pushed on an earlier connection may still finish; they touch only their
// own session.
type streamSession struct {
	mu           sync.Mutex
	confirmed    pglogrepl.LSN // highest LSN safe to confirm
	inflight     int           // pushed batches not yet done
	lastProgress time.Time
	closed       bool // the connection is gone: its queued batches are skipped
}

func newStreamer(ctx context.Context, r *Relay, out chan<- streamBatch) (*streamer, error) {
	// A server that cannot stream is a configuration error: say so at start.
	// Creating the slot waits for every running transaction in the cluster,
	// so that happens in run, while the fallback poll already serves.
	if err := checkWALLevel(ctx, r.pool); err != nil {
		return nil, err
	}
	config := r.pool.Config().ConnConfig.Config.Copy()
	config.RuntimeParams["replication"] = "database"
	return &streamer{r: r, out: out, log: r.log.With(zap.String("slot", r.cfg.Slot)), config: config}, nil
}

// EnsureStream creates the publication on outbox_messages and the logical
// replication slot, unless they exist. Safe to run from several processes.
func EnsureStream(ctx context.Context, pool *pgxpool.Pool, slot, publication string) error {
	if !validIdentifier(slot) || !validIdentifier(publication) {
		return fmt.Errorf("slot %q and publication %q must be lower-case letters, digits and underscores", slot, publication)
	}
	if err := checkWALLevel(ctx, pool); err != nil {
		return err
	}
	var exists bool
	if err := pool.QueryRow(ctx, gsql.Query("PublicationExists"), publication).Scan(&exists); err != nil {
		return fmt.Errorf("look up publication %s: %w", publication, err)
	}
	// published is where the WAL stood once this call created the
	// publication: a slot that would decode from before it meets changes
	// its publication did not exist for, and pgoutput fails on the first of
	// them on every connection ("publication does not exist"), so that the
	// slot never moves and holds WAL back. Such a slot is made again (the
	// table is the truth: ADR 0004).
	var published *string
	if !exists {
		// Identifiers cannot be parameters; the name is validated and quoted.
		_, err := pool.Exec(ctx, "CREATE PUBLICATION "+pgx.Identifier{publication}.Sanitize()+
			" FOR TABLE outbox_messages WITH (publish = 'insert')")
		if err != nil && !isDuplicate(err) {
			return fmt.Errorf("create publication %s: %w", publication, err)
		}
		if err == nil {
			published = new(string)
			if err := pool.QueryRow(ctx, gsql.Query("WALPositionRead")).Scan(published); err != nil {
				return fmt.Errorf("read the WAL position: %w", err)
			}
		}
	}
	var usable, active, before bool
	var kind string
	err := pool.QueryRow(ctx, gsql.Query("ReplicationSlotInspect"), slot, published).Scan(&usable, &kind, &active, &before)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("look up replication slot %s: %w", slot, err)
	case !usable:
		return fmt.Errorf("replication slot %s exists but is a %s, not this database's pgoutput slot: give this sync another --slot", slot, kind)
	case before && active:
		return fmt.Errorf("replication slot %s is older than publication %s, which was just made again, and is in use: stop the sync that streams from it, then start again", slot, publication)
	case before:
		if _, err := pool.Exec(ctx, gsql.Query("ReplicationSlotDrop"), slot); err != nil && !isUndefinedObject(err) {
			return fmt.Errorf("drop replication slot %s, older than its publication: %w", slot, err)
		}
	default:
		return nil
	}
	_, err = pool.Exec(ctx, gsql.Query("ReplicationSlotCreate"), slot)
	if err != nil && !isDuplicate(err) {
		return fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	return nil
}

func isUndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}

func checkWALLevel(ctx context.Context, pool *pgxpool.Pool) error {
	var walLevel string
	if err := pool.QueryRow(ctx, gsql.Query("WALLevelRead")).Scan(&walLevel); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return fmt.Errorf("%w (it is %q)", ErrWALLevel, walLevel)
	}
	return nil
}

// DropStream drops the slot and the publication. A slot in use is tried
// again until wait has passed: a sync that has just stopped has closed its
// replication connection, but PostgreSQL's walsender may not have let go of
// the slot yet. A slot still in use after that is an error naming the
// process that holds it.
func DropStream(ctx context.Context, pool *pgxpool.Pool, slot, publication string, wait time.Duration) error {
	if !validIdentifier(slot) || !validIdentifier(publication) {
		return fmt.Errorf("slot %q and publication %q must be lower-case letters, digits and underscores", slot, publication)
	}
	deadline := time.Now().Add(wait)
	for {
		_, err := pool.Exec(ctx, gsql.Query("ReplicationSlotDropIfExists"), slot)
		if err == nil {
			break
		}
		if !isObjectInUse(err) || time.Now().After(deadline) {
			return fmt.Errorf("drop replication slot %s (stop the sync service using it first): %w", slot, err)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("drop replication slot %s: %w", slot, ctx.Err())
		}
	}
	if _, err := pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{publication}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %s: %w", publication, err)
	}
	return nil
}

// isDuplicate: the object exists (42710), or a concurrent creator won the
// race on the catalog's unique index (23505).
func isDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42710" || pgErr.Code == "23505")
}

func isObjectInUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// slotReleaseGrace: see run.
const slotReleaseGrace = 10 * time.Second

// run follows the slot until ctx is done, reconnecting after errors (a
// PostgreSQL restart, a slot held by another relay) with backoff. While it
// cannot stream, the fallback poll keeps rows flowing.
//
// A slot found in use soon after this relay started or lost its own
// connection is likely still held by a walsender of a connection just gone
// (this relay's, or that of the process this one replaced), which PostgreSQL
// ends a moment later after a clean close (after wal_sender_timeout when the
// network dropped it): for slotReleaseGrace it is tried again with the
// backoff, not after the fallback poll interval (30 s by default) as a slot
// another relay holds.
func (s *streamer) run(ctx context.Context) error {
	backoff := newBackoff(s.r.cfg.SinkBackoff, s.r.cfg.SinkBackoffMax)
	lost := time.Now() // when this relay started, or a connection that streamed ended
	for ctx.Err() == nil {
		established := false
		err := EnsureStream(ctx, s.r.pool, s.r.cfg.Slot, s.r.cfg.Publication)
		if err == nil {
			established, err = s.follow(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		if established && publicationMissing(err) {
			s.mendSlot(ctx)
		}
		if established {
			// A connection that streamed starts the backoff afresh: a
			// process that lost it twenty times in its life still
			// reconnects at once, not after the maximum. Not after a stall:
			// the sink is still failing, and each new connection has the
			// server decode the stalled transactions again.
			if !errors.Is(err, errStreamStalled) {
				backoff.reset()
			}
			lost = time.Now()
		}
		wait := backoff.next()
		if isObjectInUse(err) && time.Since(lost) < slotReleaseGrace {
			s.log.Info("replication slot is still held, likely by a connection just gone; trying again", zap.Duration("retry_in", wait))
		} else if isObjectInUse(err) {
			wait = s.r.cfg.FallbackPollInterval
			s.log.Info("replication slot is held by another relay; this one serves the fallback poll", zap.Duration("retry_in", wait))
		} else if errors.Is(err, errStreamStalled) {
			s.log.Warn("replication stream stalled behind undelivered transactions; reconnecting later", zap.Duration("backoff", wait))
		} else {
			s.log.Warn("replication stream stopped; reconnecting", zap.String("error", redact.Text(err.Error())), zap.Duration("backoff", wait))
		}
		if !sleepCtx(ctx, wait) {
			return nil
		}
		if err == nil {
			backoff.reset()
		}
	}
	return nil
}

// publicationMissing reports pgoutput's answer (undefined_object, on a
// connection that already streamed: the slot itself was found) to a slot
// that decodes changes from before its publication existed (a publication dropped and
// made again by hand, or by an EnsureStream that stopped before it looked at
// the slot): it fails so on every connection, and the slot never moves.
func publicationMissing(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}

// mendSlot drops a slot pgoutput cannot decode (publicationMissing), for
// the next EnsureStream to make it again from the current WAL position: the
// rows committed in between are in the outbox, where the fallback poll finds
// them (the table is the truth: ADR 0004). A slot still held by the
// walsender of the connection just gone is dropped on a later try, when the
// same error comes again.
func (s *streamer) mendSlot(ctx context.Context) {
	_, err := s.r.pool.Exec(ctx, gsql.Query("ReplicationSlotDrop"), s.r.cfg.Slot)
	switch {
	case err == nil:
		s.log.Warn("replication slot decoded changes from before its publication existed; it is made again, and the fallback poll delivers the rows of the gap",
			zap.String("publication", s.r.cfg.Publication))
	case isObjectInUse(err) || isUndefinedObject(err):
	default:
		s.log.Warn("could not drop a replication slot that decodes from before its publication existed",
			zap.String("error", redact.Text(err.Error())))
	}
}

// follow runs one replication connection. established reports whether it
// got as far as streaming.
func (s *streamer) follow(ctx context.Context) (established bool, err error) {
	conn, err := pgconn.ConnectConfig(ctx, s.config)
	if err != nil {
		return false, fmt.Errorf("replication connect: %w", err)
	}
	defer closeWithin(ctx, conn.Close)

	err = pglogrepl.StartReplication(ctx, conn, s.r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + s.r.cfg.Publication + "'"},
	})
	if err != nil {
		return false, fmt.Errorf("start replication on slot %s: %w", s.r.cfg.Slot, err)
	}
	return true, s.stream(ctx, conn)
}

// stream follows a started replication connection until it fails.
func (s *streamer) stream(ctx context.Context, conn *pgconn.PgConn) error {
	s.log.Info("streaming outbox inserts")

	session := &streamSession{lastProgress: time.Now()}
	s.current.Store(session)
	defer func() {
		s.current.CompareAndSwap(session, nil)
		session.close()
	}()
	stalled := func() bool {
		session.mu.Lock()
		defer session.mu.Unlock()
		return session.inflight > 0 && time.Since(session.lastProgress) > s.r.cfg.StreamStallTimeout
	}
	var (
		outboxRelation uint32
		idColumn       = -1
		txIDs          []int64
		inTx           bool
		serverWALEnd   pglogrepl.LSN
		nextStatus     = time.Now()
	)
	sendStatus := func(replyRequested bool) error {
		confirmed := session.confirmedLSN()
		err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: confirmed, WALFlushPosition: confirmed, WALApplyPosition: confirmed,
			ReplyRequested: replyRequested,
		})
		if err != nil {
			return fmt.Errorf("send standby status: %w", err)
		}
		s.r.metrics.streamPosition.Set(float64(confirmed))
		if serverWALEnd > confirmed {
			s.r.metrics.slotLagBytes.Set(float64(serverWALEnd - confirmed))
		} else {
			s.r.metrics.slotLagBytes.Set(0)
		}
		nextStatus = time.Now().Add(s.r.cfg.StandbyStatusInterval)
		return nil
	}
	// push hands a transaction to the worker, still reporting status while the
	// worker is busy so the server does not time the connection out.
	push := func(batch streamBatch) error {
		for {
			timer := time.NewTimer(time.Until(nextStatus))
			select {
			case s.out <- batch:
				timer.Stop()
				return nil
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-timer.C:
				if stalled() {
					return errStreamStalled
				}
				if err := sendStatus(false); err != nil {
					return err
				}
			}
		}
	}

	for {
		if stalled() {
			return errStreamStalled
		}
		if !time.Now().Before(nextStatus) {
			// Asking for a reply is the heartbeat: the keepalive that answers
			// carries the server's WAL end, which an idle stream confirms.
			if err := sendStatus(true); err != nil {
				return err
			}
		}
		recvCtx, cancel := context.WithDeadline(ctx, nextStatus)
		raw, err := conn.ReceiveMessage(recvCtx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("receive replication message: %w", err)
		}
		if errMsg, ok := raw.(*pgproto3.ErrorResponse); ok {
			return pgconn.ErrorResponseToPgError(errMsg)
		}
		copyData, ok := raw.(*pgproto3.CopyData)
		if !ok || len(copyData.Data) == 0 {
			continue
		}
		switch copyData.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			keepalive, err := pglogrepl.ParsePrimaryKeepaliveMessage(copyData.Data[1:])
			if err != nil {
				return fmt.Errorf("parse keepalive: %w", err)
			}
			serverWALEnd = keepalive.ServerWALEnd
			if !inTx {
				session.advanceIdle(keepalive.ServerWALEnd)
			}
			if keepalive.ReplyRequested {
				nextStatus = time.Now()
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(copyData.Data[1:])
			if err != nil {
				return fmt.Errorf("parse XLogData: %w", err)
			}
			if xld.ServerWALEnd > serverWALEnd {
				serverWALEnd = xld.ServerWALEnd
			}
			message, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return fmt.Errorf("parse logical message: %w", err)
			}
			switch m := message.(type) {
			case *pglogrepl.RelationMessage:
				if m.RelationName == "outbox_messages" {
					outboxRelation = m.RelationID
					idColumn = -1
					for i, col := range m.Columns {
						if col.Name == "id" {
							idColumn = i
						}
					}
					if idColumn < 0 {
						return errors.New("replication: outbox_messages relation has no id column")
					}
				}
			case *pglogrepl.BeginMessage:
				inTx = true
				txIDs = nil
			case *pglogrepl.InsertMessage:
				if m.RelationID != outboxRelation || idColumn < 0 || m.Tuple == nil || idColumn >= len(m.Tuple.Columns) {
					continue
				}
				id, err := strconv.ParseInt(string(m.Tuple.Columns[idColumn].Data), 10, 64)
				if err != nil {
					s.log.Warn("replication: unreadable outbox id; the fallback poll will deliver the row", zap.String("error", redact.Text(err.Error())))
					continue
				}
				txIDs = append(txIDs, id)
			case *pglogrepl.CommitMessage:
				inTx = false
				end := m.TransactionEndLSN
				if len(txIDs) == 0 {
					session.advanceIdle(end)
					continue
				}
				session.pushing()
				if err := push(streamBatch{ids: txIDs, done: func() { session.handled(end) }, progress: s.progressed, live: session.isLive}); err != nil {
					session.mu.Lock()
					session.inflight-- // never handed over
					session.mu.Unlock()
					return err
				}
				txIDs = nil
			}
		}
	}
}

// pushing counts a transaction handed to the worker. The stall clock runs
// from the oldest transaction in flight: one pushed after a quiet spell
// starts it afresh, or the quiet spell would count as a stall.
func (s *streamSession) pushing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight == 0 {
		s.lastProgress = time.Now()
	}
	s.inflight++
}

// handled records that a pushed transaction was delivered and marked. The
// worker handles batches in push order, so end only grows.
func (s *streamSession) handled(end pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	s.lastProgress = time.Now()
	if end > s.confirmed {
		s.confirmed = end
	}
}

// progressed records that the stream worker moved on (a chunk went
// through), whichever connection named its rows: the open connection's
// stall clock starts again. A chunk of a connection gone, finishing while
// the new connection's first transactions wait behind it, is progress too:
// the sink delivers. Counting only a connection's own batches made a slow
// sink look stalled to every new connection, which let go before its own
// batches came up, again and again, while the slot never moved.
func (s *streamer) progressed() {
	if session := s.current.Load(); session != nil {
		session.progressed()
	}
}

// progressed starts the session's stall clock again.
func (s *streamSession) progressed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastProgress = time.Now()
}

// close marks the session's connection gone.
func (s *streamSession) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// isLive reports whether the session's connection is still open.
func (s *streamSession) isLive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed
}

// advanceIdle confirms up to lsn when nothing is in flight.
func (s *streamSession) advanceIdle(lsn pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight == 0 && lsn > s.confirmed {
		s.confirmed = lsn
	}
}

func (s *streamSession) confirmedLSN() pglogrepl.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}
