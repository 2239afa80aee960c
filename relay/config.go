package relay

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// WakeMode says how a relay learns that there is work.
type WakeMode string

const (
	// WakePoll claims every PollInterval.
	WakePoll WakeMode = "poll"
	// WakeNotify claims when a LISTEN/NOTIFY hint arrives, and every
	// PollInterval as a safety net.
	WakeNotify WakeMode = "notify"
	// WakeStream follows the outbox through logical replication and claims
	// the rows it names in commit order; a fallback poll every
	// FallbackPollInterval catches anything it missed.
	WakeStream WakeMode = "stream"
)

// ParseWakeMode checks a wake mode given by a user.
func ParseWakeMode(s string) (WakeMode, error) {
	switch m := WakeMode(strings.ToLower(strings.TrimSpace(s))); m {
	case WakePoll, WakeNotify, WakeStream:
		return m, nil
	default:
		return "", fmt.Errorf("unknown wake mode %q: want poll, notify or stream", s)
	}
}

// Config of a Relay. The zero value of each field means its default.
type Config struct {
	// ID names this relay process in the identity of each batch it claims
	// (outbox_batches.holder, and the locked_by of a row whose batch was
	// taken over after it died). Default: host-pid-random.
	ID string
	// Wake is the wake mode. Default: poll.
	Wake WakeMode
	// Workers is the number of concurrent claim-deliver loops. Default: 1.
	Workers int
	// BatchSize is the most rows one claim takes. Default: 500.
	BatchSize int
	// BacklogBatchSize is the most rows one claim takes while a backlog
	// exists: after each claim that came back full the next may take twice
	// as many, up to this; a claim that comes back short returns to
	// BatchSize. Larger Neo4j transactions apply more events per second;
	// without a backlog, batches stay small and latency low. Default:
	// 4 × BatchSize. Set it to BatchSize to keep batches fixed.
	BacklogBatchSize int
	// MaxBatchBytes bounds the payload bytes one claim takes (a claim takes
	// at least one row): a backlog of large events must not put thousands
	// of them in the relay's memory, and in one Neo4j transaction, at once.
	// Default: 32 MiB.
	MaxBatchBytes int64
	// PollInterval is the poll mode's period and the notify mode's safety
	// net. Default: 500ms.
	PollInterval time.Duration
	// FallbackPollInterval is how often the stream mode polls for rows the
	// stream did not deliver. Default: 30s.
	FallbackPollInterval time.Duration
	// Lease is how long a claim holds its rows before another relay may take
	// them over; a live relay renews it every Lease/3. Default: 15s.
	Lease time.Duration
	// RetryStep and RetryMaxSteps give the retry schedule: a failed row waits
	// LEAST(attempts, RetryMaxSteps) * RetryStep. Defaults: 30s and 8 (the seed's).
	RetryStep     time.Duration
	RetryMaxSteps int
	// MaxAttempts is how many deliveries a row gets before it moves to the
	// DLQ. Default: 10.
	MaxAttempts int
	// SinkBackoff is the first wait after the sink failed a whole batch; it
	// doubles up to SinkBackoffMax. Defaults: 500ms and 30s.
	SinkBackoff    time.Duration
	SinkBackoffMax time.Duration
	// DrainTimeout bounds how long a stopping relay waits for the batch in
	// flight before abandoning it unmarked. Default: 10s.
	DrainTimeout time.Duration
	// DependencyWait is how long an event that waits for another
	// aggregate's events (ErrDeferred) stays handed back before it is
	// claimed again the first time. Default: 1s.
	DependencyWait time.Duration
	// DependencyWaitMax bounds the wait of an event deferred again and
	// again: each deferral waits about as long as its aggregate has waited
	// since the first (the wait doubles), from DependencyWait up to this.
	// Default: 1m, or DependencyWait if that is longer.
	DependencyWaitMax time.Duration
	// NotifyChannel is the LISTEN channel of the notify mode, and the
	// channel the trigger NotifyTriggerEnable installs notifies. A plain
	// lower-case identifier. Default: graphsync_outbox.
	NotifyChannel string
	// Slot and Publication name the stream mode's replication slot and
	// publication. Defaults: graphsync_outbox and graphsync_outbox.
	Slot        string
	Publication string
	// StandbyStatusInterval is how often the stream mode reports its
	// position to the server. Default: 10s.
	StandbyStatusInterval time.Duration
	// StreamStallTimeout is how long the stream mode keeps a replication
	// connection whose transactions cannot be delivered (PostgreSQL or the
	// sink down) before it lets go and reconnects later. Default: 10s.
	StreamStallTimeout time.Duration
}

// DefaultConfig is every default of Config that does not derive from
// another field, in one place: withDefaults fills zero fields from it, and
// the sync command's flags take their defaults from it. ID (host-pid-random),
// BacklogBatchSize (4 × BatchSize) and DependencyWaitMax (1m, or
// DependencyWait if that is longer) derive and stay zero here.
func DefaultConfig() Config {
	return Config{
		Wake:                  WakePoll,
		Workers:               1,
		BatchSize:             500,
		MaxBatchBytes:         32 << 20,
		PollInterval:          500 * time.Millisecond,
		FallbackPollInterval:  30 * time.Second,
		Lease:                 15 * time.Second,
		RetryStep:             30 * time.Second,
		RetryMaxSteps:         8,
		MaxAttempts:           10,
		SinkBackoff:           500 * time.Millisecond,
		SinkBackoffMax:        30 * time.Second,
		DrainTimeout:          10 * time.Second,
		DependencyWait:        time.Second,
		NotifyChannel:         "graphsync_outbox",
		Slot:                  "graphsync_outbox",
		Publication:           "graphsync_outbox",
		StandbyStatusInterval: 10 * time.Second,
		StreamStallTimeout:    10 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	fillZero(&c, DefaultConfig())
	if c.ID == "" {
		c.ID = defaultRelayID()
	}
	if c.BacklogBatchSize == 0 {
		c.BacklogBatchSize = 4 * c.BatchSize
	}
	if c.DependencyWaitMax == 0 {
		c.DependencyWaitMax = max(time.Minute, c.DependencyWait)
	}
	return c
}

// fillZero sets each zero exported field of *c to the same field of d.
func fillZero[T any](c *T, d T) {
	v, dv := reflect.ValueOf(c).Elem(), reflect.ValueOf(d)
	for i := range v.NumField() {
		if f := v.Field(i); f.CanSet() && f.IsZero() {
			f.Set(dv.Field(i))
		}
	}
}

// Validate reports what is wrong with c once its defaults are filled in, as
// New would, so that a command can refuse its flags before it connects.
func (c Config) Validate() error {
	return c.withDefaults().validate()
}

func (c Config) validate() error {
	var errs []error
	if _, err := ParseWakeMode(string(c.Wake)); err != nil {
		errs = append(errs, err)
	}
	positive := map[string]int64{
		"workers": int64(c.Workers), "batch size": int64(c.BatchSize), "poll interval": int64(c.PollInterval),
		"fallback poll interval": int64(c.FallbackPollInterval), "lease": int64(c.Lease),
		"retry step": int64(c.RetryStep), "retry max steps": int64(c.RetryMaxSteps),
		"max attempts": int64(c.MaxAttempts), "sink backoff": int64(c.SinkBackoff),
		"drain timeout": int64(c.DrainTimeout), "standby status interval": int64(c.StandbyStatusInterval),
		"stream stall timeout": int64(c.StreamStallTimeout), "dependency wait": int64(c.DependencyWait),
		"max batch bytes": c.MaxBatchBytes,
	}
	for name, v := range positive {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("relay %s must be positive", name))
		}
	}
	if c.BacklogBatchSize < c.BatchSize {
		errs = append(errs, fmt.Errorf("relay backlog batch size %d is smaller than the batch size %d", c.BacklogBatchSize, c.BatchSize))
	}
	if c.Lease > 0 && c.Lease < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("relay lease %s is too short to renew (minimum 300ms)", c.Lease))
	}
	if c.MaxAttempts > 32000 {
		errs = append(errs, fmt.Errorf("relay max attempts %d does not fit outbox_messages.attempts (smallint)", c.MaxAttempts))
	}
	if c.DependencyWaitMax < c.DependencyWait {
		errs = append(errs, fmt.Errorf("relay dependency wait max %s is below dependency wait %s", c.DependencyWaitMax, c.DependencyWait))
	}
	if c.SinkBackoffMax < c.SinkBackoff {
		errs = append(errs, fmt.Errorf("relay sink backoff max %s is below sink backoff %s", c.SinkBackoffMax, c.SinkBackoff))
	}
	for name, v := range map[string]string{"slot": c.Slot, "publication": c.Publication, "notify channel": c.NotifyChannel} {
		if !validIdentifier(v) {
			errs = append(errs, fmt.Errorf("relay %s %q: use lower-case letters, digits and underscores (at most 63)", name, v))
		}
	}
	return errors.Join(errs...)
}

// validIdentifier keeps slot, publication and channel names to the characters
// a replication slot accepts, so they can never carry SQL.
func validIdentifier(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func defaultRelayID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "relay"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}
