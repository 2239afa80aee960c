package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"graphsync/relay"
)

func runDLQ(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{"want a subcommand: list, retry IDS..., discard IDS..."}
	}
	sub := args[0]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, false)
	tenant := fs.Int64("tenant", 0, "only this tenant's dead letters: list shows, retry and discard act on them alone (0: every tenant's)")
	limit := fs.Int("limit", 100, "list: at most this many rows")
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(os.Stderr, "usage: graphsync dlq list|retry IDS...|discard IDS... [flags]")
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		return flag.ErrHelp
	case "list", "retry", "discard":
	default:
		// Before connecting: a mistyped subcommand needs no database.
		return usageError{fmt.Sprintf("unknown dlq subcommand %q: want list, retry or discard", sub)}
	}
	words, err := parseFlagsAndWords(fs, args[1:])
	if err != nil {
		return err
	}
	if sub == "list" && len(words) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q: dlq list takes flags only", words[0])}
	}
	if sub == "list" && *limit < 1 {
		return usageError{fmt.Sprintf("--limit must be at least 1, got %d", *limit)}
	}
	var ids []int64
	for _, arg := range words {
		id, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || id <= 0 {
			return usageError{fmt.Sprintf("%q is not an outbox id", arg)}
		}
		ids = append(ids, id)
	}
	return conn.withRelayPostgres(ctx, "the dead letters would look empty and no id would be found", func(pool *pgxpool.Pool) error {
		return dlqCommand(ctx, pool, sub, ids, *tenant, *limit)
	})
}

func dlqCommand(ctx context.Context, pool *pgxpool.Pool, sub string, ids []int64, tenant int64, limit int) error {
	switch sub {
	case "list":
		// One row more than shown says whether --limit cut the list.
		letters, err := relay.DLQList(ctx, pool, tenant, limit+1)
		if err != nil {
			return err
		}
		cut := len(letters) > limit
		letters = letters[:min(len(letters), limit)]
		if tenant != 0 {
			// --tenant may come from GRAPHSYNC_TENANT, set for another
			// command: a list of one tenant says so.
			fmt.Fprintf(os.Stderr, "dlq list: tenant %d only (--tenant or GRAPHSYNC_TENANT)\n", tenant)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tTENANT\tAGGREGATE\tEVENT\tATTEMPTS\tDEAD SINCE\tLAST ERROR")
		// Producer text (types, errors) is clipped and kept to one line, so
		// one odd row cannot widen or break every line of the table.
		for _, d := range letters {
			fmt.Fprintf(w, "%d\t%d\t%s/%d\t%s v%d\t%d\t%s\t%s\n", d.ID, d.TenantID, cell(d.AggregateType, 24), d.AggregateID,
				cell(d.EventType, 40), d.EventVersion, d.Attempts, d.DeadLetteredAt.Format(time.RFC3339), cell(d.LastError, 400))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if cut {
			fmt.Fprintf(os.Stderr, "dlq list: the first %d dead letters; more exist (raise --limit)\n", limit)
		}
		return nil
	case "retry", "discard":
		if len(ids) == 0 {
			return usageError{"name the outbox ids to " + sub}
		}
		// An id named twice is one row: counted twice, it read as not found.
		ids = slices.Compact(slices.Sorted(slices.Values(ids)))
		do := relay.DLQRetry
		if sub == "discard" {
			do = relay.DLQDiscard
		}
		done, err := do(ctx, pool, tenant, ids)
		if err != nil {
			return err
		}
		fmt.Printf("dlq %s: %d of %d rows %v\n", sub, len(done), len(ids), done)
		if len(done) < len(ids) {
			if tenant != 0 {
				return fmt.Errorf("%d ids were not in tenant %d's dead letters", len(ids)-len(done), tenant)
			}
			return fmt.Errorf("%d ids were not in the DLQ", len(ids)-len(done))
		}
		return nil
	default:
		return usageError{fmt.Sprintf("unknown dlq subcommand %q: want list, retry or discard", sub)}
	}
}

func runRetention(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("retention", flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, false)
	var cfg relay.RetentionConfig
	rd := relay.DefaultRetentionConfig()
	fs.DurationVar(&cfg.ArchiveAfter, "archive-after", rd.ArchiveAfter, "move processed rows older than this to the archive")
	fs.IntVar(&cfg.ArchiveBatch, "archive-batch", rd.ArchiveBatch, "rows per archive transaction")
	fs.DurationVar(&cfg.KeepArchive, "keep-archive", rd.KeepArchive, "drop archive partitions wholly older than this")
	fs.IntVar(&cfg.MonthsAhead, "months-ahead", rd.MonthsAhead, "create archive partitions this many months ahead")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := refuseZeros(
		zeroSetting{"archive-after", cfg.ArchiveAfter == 0}, zeroSetting{"archive-batch", cfg.ArchiveBatch == 0},
		zeroSetting{"keep-archive", cfg.KeepArchive == 0}, zeroSetting{"months-ahead", cfg.MonthsAhead == 0},
	); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	return conn.withRelayPostgres(ctx, "retention would archive nothing", func(pool *pgxpool.Pool) error {
		report, err := relay.Retain(ctx, pool, cfg)
		fmt.Printf("retention: archived %d rows; partitions created %v; dropped %v\n",
			report.Archived, report.PartitionsCreated, report.PartitionsDropped)
		if report.LeasesRemoved > 0 {
			fmt.Printf("retention: removed %d aggregate leases that ran out over %s ago\n", report.LeasesRemoved, relay.StaleLeaseAge)
		}
		return err
	})
}

func runStream(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "drop" {
		return usageError{"want: stream drop [--slot NAME] [--publication NAME]"}
	}
	fs := flag.NewFlagSet("stream drop", flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, false)
	slot := fs.String("slot", relay.DefaultConfig().Slot, "replication slot name")
	publication := fs.String("publication", relay.DefaultConfig().Publication, "publication name")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	return conn.withPostgres(ctx, func(pool *pgxpool.Pool) error {
		if err := relay.DropStream(ctx, pool, *slot, *publication, slotReleaseWait); err != nil {
			return err
		}
		fmt.Printf("stream: dropped slot %s and publication %s\n", *slot, *publication)
		return nil
	})
}

// slotReleaseWait is how long dropping the replication slot waits for it to
// be let go: a sync stopped just before still holds it until PostgreSQL's
// walsender has noticed (usually milliseconds).
const slotReleaseWait = 5 * time.Second

func runNotify(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "enable" && args[0] != "disable") {
		return usageError{"want: notify enable|disable"}
	}
	fs := flag.NewFlagSet("notify "+args[0], flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, false)
	channel := fs.String("notify-channel", relay.DefaultConfig().NotifyChannel, "the channel the trigger notifies: the relay's --notify-channel")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	change := func(ctx context.Context, pool *pgxpool.Pool) error {
		return relay.NotifyTriggerEnable(ctx, pool, *channel)
	}
	if args[0] == "disable" {
		change = relay.NotifyTriggerDisable
	}
	return conn.withPostgres(ctx, func(pool *pgxpool.Pool) error {
		if err := change(ctx, pool); err != nil {
			return err
		}
		fmt.Printf("notify: trigger %sd\n", args[0])
		return nil
	})
}

// cell fits a producer's text into one table cell: one line, at most
// maxRunes runes.
func cell(s string, maxRunes int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxRunes {
		return string(r[:maxRunes-1]) + "…"
	}
	return s
}
