package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"graphsync/embed"
	"graphsync/embed/stage"
	"graphsync/graphmodel"
	"graphsync/projector"
	gsql "graphsync/sql"
)

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	var conn connFlags
	conn.register(fs, true)
	var embedCfg embed.Config
	embedCfg.RegisterFlags(fs)
	skipNeo4j := fs.Bool("skip-neo4j", false, "apply only the PostgreSQL migrations (env GRAPHSYNC_SKIP_NEO4J)")
	indexWait := fs.Duration("index-wait", stage.DefaultVectorIndexWait, "how long to wait for the vector index to come online (env GRAPHSYNC_INDEX_WAIT)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *indexWait <= 0 {
		return usageError{fmt.Sprintf("--index-wait must be positive, got %s", *indexWait)}
	}
	embedder, _, err := openEmbedder(embedCfg)
	if err != nil {
		return err
	}
	if embedder != nil {
		defer embedder.Close()
	}
	pool, err := conn.openPostgres(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Check Neo4j before changing anything, so a bad Neo4j setting leaves
	// PostgreSQL untouched too.
	var driverClose func()
	var ensureGraph func() error
	if !*skipNeo4j {
		driver, err := conn.openNeo4j(ctx, true)
		if err != nil {
			return err
		}
		driverClose = func() { driver.Close(ctx) }
		ensureGraph = func() error {
			if err := projector.EnsureSchema(ctx, driver); err != nil {
				return err
			}
			written, err := projector.BackfillTenantKeys(ctx, driver, graphmodel.Default, "")
			if err != nil {
				return err
			}
			if written > 0 {
				fmt.Printf("neo4j: wrote the tenant key of %d nodes synced before it existed\n", written)
			}
			if embedder == nil {
				return nil
			}
			// The vector index takes the embedder's dimension; none leaves
			// it as it is.
			return stage.EnsureVectorIndexWithin(ctx, driver, "", graphmodel.Default, embedder.Dimension(), *indexWait)
		}
		defer driverClose()
	}
	applied, err := gsql.Migrate(ctx, pool, gsql.WhileWaiting(func(holder int64) {
		fmt.Fprintf(os.Stderr, "postgresql: waiting for another graphsync migrate to finish (backend pid %d holds the migration lock)\n", holder)
	}))
	for _, name := range applied {
		fmt.Println("postgresql: applied", name)
	}
	if err != nil {
		if len(applied) > 0 {
			err = fmt.Errorf("%w (applied before it: %s)", err, strings.Join(applied, ", "))
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P07" { // duplicate_table
			err = fmt.Errorf("%w: the database already has a table these migrations create (an outbox made from the "+
				"platform's DDL, say); graphsync migrate does not adopt existing tables", err)
		}
		return err
	}
	if len(applied) == 0 {
		fmt.Println("postgresql: schema is current, nothing applied")
	}
	var walLevel string
	if err := pool.QueryRow(ctx, gsql.Query("WALLevelRead")).Scan(&walLevel); err == nil && walLevel != "logical" {
		fmt.Printf("postgresql: note: wal_level is %q; the stream wake mode needs wal_level=logical (poll and notify work as is)\n", walLevel)
	}
	if ensureGraph != nil {
		if err := ensureGraph(); err != nil {
			return fmt.Errorf("neo4j: create constraints and indexes: %w", err)
		}
		fmt.Println("neo4j: constraints and indexes are in place")
	}
	return nil
}
