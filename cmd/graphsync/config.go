package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"graphsync/drift"
	"graphsync/redact"
	gsql "graphsync/sql"
)

// connFlags are the connection settings every command shares.
type connFlags struct {
	pgURL         string
	neo4jURI      string
	neo4jUser     string
	neo4jPassword string
	logLevel      string
	logFormat     string
}

func (c *connFlags) register(fs *flag.FlagSet, needNeo4j bool) {
	fs.StringVar(&c.pgURL, "pg-url", "", "PostgreSQL URL, e.g. postgres://user:pass@host:5432/db (env GRAPHSYNC_PG_URL)")
	if needNeo4j {
		fs.StringVar(&c.neo4jURI, "neo4j-uri", "", "Neo4j Bolt URI, e.g. bolt://localhost:7687 (env GRAPHSYNC_NEO4J_URI)")
		fs.StringVar(&c.neo4jUser, "neo4j-user", "", "Neo4j user; empty for a server with auth off (env GRAPHSYNC_NEO4J_USER)")
		fs.StringVar(&c.neo4jPassword, "neo4j-password", "", "Neo4j password (env GRAPHSYNC_NEO4J_PASSWORD)")
	}
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error (env GRAPHSYNC_LOG_LEVEL); commands that only print a result check it and log nothing")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or console (env GRAPHSYNC_LOG_FORMAT)")
}

// parseFlags parses args, then fills every flag not given on the command line
// from GRAPHSYNC_<NAME>. A command of flags only refuses a word among them:
// the flag package stops at the first word and drops every flag after it,
// and `--until-caught-up false` would turn the flag on.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseQuietly(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q: graphsync %s takes flags only (a true/false flag is set with --name=false)", fs.Arg(0), fs.Name())}
	}
	return fillFromEnv(fs)
}

// zeroSetting is a flag whose zero its library reads as "the default"
// (relay.Config, RetentionConfig, projector.Config): zero says whether it
// was given as 0.
type zeroSetting struct {
	flag string
	zero bool
}

// refuseZeros names the first setting given as 0, on the command line or
// in the environment: a mistake that running with the default would hide.
func refuseZeros(settings ...zeroSetting) error {
	for _, s := range settings {
		if s.zero {
			return usageError{fmt.Sprintf("--%s must be positive, got 0 (leave it out for its default)", s.flag)}
		}
	}
	return nil
}

// signSetting is a flag whose negative value its library would refuse with
// its own field's name: negative says whether it was given below zero.
type signSetting struct {
	flag     string
	value    any
	negative bool
}

// refuseNegatives names the first setting given below zero.
func refuseNegatives(settings ...signSetting) error {
	for _, s := range settings {
		if s.negative {
			return usageError{fmt.Sprintf("--%s must be positive, got %v", s.flag, s.value)}
		}
	}
	return nil
}

// joinedLine is an error of several joined ones on one line.
func joinedLine(err error) string {
	return strings.Join(strings.Split(err.Error(), "\n"), "; ")
}

// recheckWait reads --recheck-after: 0 looks again at once (drift.Config
// would read a zero as its default), a negative wait is a mistake.
func recheckWait(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("--recheck-after must not be negative, got %s", d)
	case d == 0:
		return drift.NoRecheckWait, nil
	}
	return d, nil
}

// parseQuietly parses args; a mistake comes back as one usageError line
// (the flag package would print every flag's usage after it), and --help
// prints the usage.
func parseQuietly(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return usageError{fmt.Sprintf("%v (graphsync %s --help lists the flags)", err, fs.Name())}
	}
	return nil
}

// parseFlagsAndWords is parseFlags for a command whose positional words may
// stand between its flags (`context --tenant 1 wireless speaker --format
// json`, `dlq retry 42 --tenant 7`): it returns the words in order. After
// "--" every argument is a word, "--tenant=2" too: a caller that puts a
// user's text there cannot have it read as a flag.
func parseFlagsAndWords(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := parseQuietly(fs, args); err != nil {
			return nil, err
		}
		if consumed := len(args) - fs.NArg(); consumed > 0 && args[consumed-1] == "--" {
			words = append(words, fs.Args()...)
			break
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return words, fillFromEnv(fs)
}

// emptyIsAValue names the flags for which an empty value means something
// other than the default (an empty --http-addr disables the HTTP server):
// for them GRAPHSYNC_<NAME>= set empty counts; for every other flag an
// empty variable is as good as an unset one.
var emptyIsAValue = map[string]bool{"http-addr": true}

// fillFromEnv sets every flag not given on the command line from
// GRAPHSYNC_<NAME>.
func fillFromEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := "GRAPHSYNC_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && (v != "" || emptyIsAValue[f.Name]) {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", env, v, err))
			}
		}
	})
	if len(errs) > 0 {
		return usageError{errors.Join(errs...).Error()}
	}
	return nil
}

func (c *connFlags) logger() (*zap.Logger, error) {
	cfg, err := c.logConfig()
	if err != nil {
		return nil, err
	}
	return cfg.Build()
}

// logConfig reads --log-level and --log-format. Every command checks them,
// those that log nothing too (before they connect): a wrong value is a
// usage error wherever it is given.
func (c *connFlags) logConfig() (zap.Config, error) {
	level, err := zapcore.ParseLevel(c.logLevel)
	if err != nil {
		return zap.Config{}, usageError{fmt.Sprintf("log level %q: want debug, info, warn or error", c.logLevel)}
	}
	var cfg zap.Config
	switch c.logFormat {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
	default:
		return zap.Config{}, usageError{fmt.Sprintf("log format %q: want json or console", c.logFormat)}
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.DisableStacktrace = true
	return cfg, nil
}

// openPostgres connects and pings, with an error that names the server
// (password redacted) and what to check.
func (c *connFlags) openPostgres(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	if _, err := c.logConfig(); err != nil {
		return nil, err
	}
	if c.pgURL == "" {
		return nil, usageError{"no PostgreSQL URL: set --pg-url or GRAPHSYNC_PG_URL (after make services-up: source .local/services.env)"}
	}
	cfg, err := pgxpool.ParseConfig(c.pgURL)
	if err != nil {
		return nil, usageError{fmt.Sprintf("PostgreSQL URL %s is not valid: %v", redact.URL(c.pgURL), redactErr(err, c.pgURL))}
	}
	// pgx ends a URL's userinfo at its first '@': a password holding an
	// unescaped '@' would be cut there, and the rest of it looked up as part
	// of the host name, named in every error that follows.
	// With a '/' in it too, the rest after the '/' became the database name.
	names := []string{cfg.ConnConfig.Host, cfg.ConnConfig.Database}
	for _, fallback := range cfg.ConnConfig.Fallbacks {
		names = append(names, fallback.Host)
	}
	for _, name := range names {
		// As written in the URL: a percent-encoded '@' (my%40db) is the
		// user's own.
		if strings.Contains(name, "@") && strings.Contains(c.pgURL, name) {
			return nil, usageError{fmt.Sprintf("PostgreSQL URL %s: its user name or password holds an '@' that is not percent-encoded; write it as %%40", redact.URL(c.pgURL))}
		}
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if cfg.PingTimeout == 0 {
		// The pool pings a connection idle for a second before handing it
		// out; one that went silent is dropped after this, not after the
		// kernel's TCP timeout (about 15 minutes).
		cfg.PingTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s: %v", redact.URL(c.pgURL), redactErr(err, c.pgURL))
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %v", redact.URL(c.pgURL), redactErr(err, c.pgURL))
	}
	return pool, nil
}

// withPostgres runs fn with a small pool for an admin command.
func (c *connFlags) withPostgres(ctx context.Context, fn func(*pgxpool.Pool) error) error {
	pool, err := c.openPostgres(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool)
}

// withRelayPostgres is withPostgres for a command that reads every
// tenant's outbox rows (dlq, retention): a role that row-level security
// keeps from them is refused first (requireRelayRole).
func (c *connFlags) withRelayPostgres(ctx context.Context, consequence string, fn func(*pgxpool.Pool) error) error {
	return c.withPostgres(ctx, func(pool *pgxpool.Pool) error {
		if err := requireRelayRole(ctx, pool, consequence); err != nil {
			return err
		}
		return fn(pool)
	})
}

// requireRelayRole refuses a schema with migrations pending, then (exit 2) a
// PostgreSQL role that cannot read every tenant's rows
// (gsql.CheckRoleSeesEveryTenant), saying what the command would have done
// with it: row-level security hides the rows without an error.
func requireRelayRole(ctx context.Context, pool *pgxpool.Pool, consequence string) error {
	pending, err := gsql.Pending(ctx, pool)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return fmt.Errorf("PostgreSQL schema is not current (%d migrations pending, first %s): run graphsync migrate", len(pending), pending[0])
	}
	err = gsql.CheckRoleSeesEveryTenant(ctx, pool)
	var roleErr *gsql.RoleError
	if errors.As(err, &roleErr) {
		return usageError{fmt.Sprintf("%v; %s", err, consequence)}
	}
	return err
}

// withServers runs fn with a pool of maxConns connections to PostgreSQL and
// a Neo4j driver that reached its server, and closes both after it.
func (c *connFlags) withServers(ctx context.Context, maxConns int32, fn func(*pgxpool.Pool, neo4j.DriverWithContext) error) error {
	pool, err := c.openPostgres(ctx, maxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver, err := c.openNeo4j(ctx, true)
	if err != nil {
		return err
	}
	defer driver.Close(context.WithoutCancel(ctx))
	return fn(pool, driver)
}

// openNeo4j builds a driver. With verify, an unreachable server is an error;
// bad credentials are always one.
func (c *connFlags) openNeo4j(ctx context.Context, verify bool) (neo4j.DriverWithContext, error) {
	if _, err := c.logConfig(); err != nil {
		return nil, err
	}
	if c.neo4jURI == "" {
		return nil, usageError{"no Neo4j URI: set --neo4j-uri or GRAPHSYNC_NEO4J_URI (after make services-up: source .local/services.env)"}
	}
	auth := neo4j.NoAuth()
	if c.neo4jUser != "" || c.neo4jPassword != "" {
		auth = neo4j.BasicAuth(c.neo4jUser, c.neo4jPassword, "")
	}
	driver, err := neo4j.NewDriverWithContext(c.neo4jURI, auth)
	if err != nil {
		return nil, usageError{fmt.Sprintf("Neo4j URI %s is not valid: %v", redact.URL(c.neo4jURI), redactErr(err, c.neo4jURI))}
	}
	checkCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := driver.VerifyConnectivity(checkCtx); err != nil {
		if isNeo4jAuthError(err) {
			driver.Close(ctx)
			return nil, fmt.Errorf("Neo4j at %s refused the credentials: set GRAPHSYNC_NEO4J_USER and GRAPHSYNC_NEO4J_PASSWORD (%v)", redact.URL(c.neo4jURI), redactErr(err, c.neo4jURI))
		}
		if verify {
			driver.Close(ctx)
			return nil, fmt.Errorf("cannot reach Neo4j at %s: %v", redact.URL(c.neo4jURI), redactErr(err, c.neo4jURI))
		}
		return driver, errNeo4jUnreachable{fmt.Errorf("Neo4j at %s is not reachable yet: %v", redact.URL(c.neo4jURI), redactErr(err, c.neo4jURI))}
	}
	return driver, nil
}

// errNeo4jUnreachable is returned with a usable driver when the server did
// not answer yet; the sync service starts anyway and retries.
type errNeo4jUnreachable struct{ err error }

func (e errNeo4jUnreachable) Error() string { return e.err.Error() }

func isNeo4jAuthError(err error) bool {
	var neoErr *neo4j.Neo4jError
	if errors.As(err, &neoErr) {
		return strings.HasPrefix(neoErr.Code, "Neo.ClientError.Security.")
	}
	return strings.Contains(err.Error(), "Neo.ClientError.Security.")
}

// redactErr hides passwords in an error's text, also where a driver echoed
// the connection string raw, and keeps it to one line.
func redactErr(err error, raw string) string {
	msg := redact.TextWith(err.Error(), raw)
	// pgx lists each address it tried on a line of its own: keep one line.
	return strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\t' }), " ")
}
