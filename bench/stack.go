package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// query returns an embedded statement by file name (without .sql).
func query(name string) string {
	body, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("bench: missing embedded query %s: %v", name, err))
	}
	return string(body)
}

// Environment variables bench reads, as .local/services.env writes them.
const (
	envPostgresURL   = "GRAPHSYNC_PG_URL"
	envNeo4jURI      = "GRAPHSYNC_NEO4J_URI"
	envNeo4jUser     = "GRAPHSYNC_NEO4J_USER"
	envNeo4jPassword = "GRAPHSYNC_NEO4J_PASSWORD"
)

const (
	// benchAppName marks bench's own PostgreSQL sessions, so that readiness
	// checks can tell them from the sync process's.
	benchAppName = "graphsync-bench"
	// databasePrefix names every database bench creates; slots use it too.
	databasePrefix = "gsbench_"
	// Id bases of fresh databases, as internal/stacktest draws tenant ids.
	idBaseMin = 1_000_000
	idBaseMax = 1_000_000_000_000
	// cleanBatchRows bounds one inner transaction of the graph clean-up, so a
	// large graph does not need a large Neo4j heap to delete.
	cleanBatchRows = 10_000
)

// stack is how bench reaches the services and the binary.
type stack struct {
	adminURL      string
	neo4jURI      string
	neo4jUser     string
	neo4jPassword string
	driver        neo4j.DriverWithContext
	binary        string
	logDir        string
	log           *zap.Logger
}

// stackFromEnv reads the service settings from the environment and checks
// that both services are on loopback and answer.
func stackFromEnv(ctx context.Context, binary, logDir string, log *zap.Logger) (*stack, error) {
	s := &stack{
		adminURL:      os.Getenv(envPostgresURL),
		neo4jURI:      os.Getenv(envNeo4jURI),
		neo4jUser:     os.Getenv(envNeo4jUser),
		neo4jPassword: os.Getenv(envNeo4jPassword),
		binary:        binary,
		logDir:        logDir,
		log:           log,
	}
	if s.adminURL == "" || s.neo4jURI == "" {
		return nil, fmt.Errorf("%s and %s must be set: run make bench, or `. .local/services.env` after make services-up", envPostgresURL, envNeo4jURI)
	}
	if err := checkPostgresLoopback(ctx, s.adminURL); err != nil {
		return nil, err
	}
	if err := checkNeo4jLoopback(ctx, s.neo4jURI); err != nil {
		return nil, err
	}
	auth := neo4j.NoAuth()
	if s.neo4jUser != "" || s.neo4jPassword != "" {
		auth = neo4j.BasicAuth(s.neo4jUser, s.neo4jPassword, "")
	}
	driver, err := neo4j.NewDriverWithContext(s.neo4jURI, auth)
	if err != nil {
		return nil, fmt.Errorf("neo4j driver for %s: %w", redact(s.neo4jURI), err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := driver.VerifyConnectivity(checkCtx); err != nil {
		driver.Close(ctx)
		return nil, fmt.Errorf("neo4j at %s does not answer: %w", redact(s.neo4jURI), err)
	}
	s.driver = driver
	conn, err := pgx.Connect(checkCtx, s.adminURL)
	if err != nil {
		driver.Close(ctx)
		return nil, fmt.Errorf("postgresql at %s does not answer: %w", redact(s.adminURL), err)
	}
	conn.Close(ctx)
	return s, nil
}

func (s *stack) close(ctx context.Context) {
	if s.driver != nil {
		s.driver.Close(ctx)
	}
}

// checkPostgresLoopback refuses a PostgreSQL URL whose hosts are not
// loopback addresses or local sockets.
func checkPostgresLoopback(ctx context.Context, rawURL string) error {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return fmt.Errorf("%s is not a valid PostgreSQL URL: %w", envPostgresURL, err)
	}
	hosts := []string{cfg.Host}
	for _, fallback := range cfg.Fallbacks {
		hosts = append(hosts, fallback.Host)
	}
	for _, host := range hosts {
		if strings.HasPrefix(host, "/") {
			continue // a Unix socket is local by construction
		}
		if err := checkLoopbackHost(ctx, host); err != nil {
			return fmt.Errorf("%s %s: %w", envPostgresURL, redact(rawURL), err)
		}
	}
	return nil
}

func checkNeo4jLoopback(ctx context.Context, rawURI string) error {
	parsed, err := url.Parse(rawURI)
	if err != nil || parsed.Hostname() == "" {
		return fmt.Errorf("%s %q is not a valid Bolt URI", envNeo4jURI, redact(rawURI))
	}
	if err := checkLoopbackHost(ctx, parsed.Hostname()); err != nil {
		return fmt.Errorf("%s %s: %w", envNeo4jURI, redact(rawURI), err)
	}
	return nil
}

// checkLoopbackHost accepts a host only when every address it resolves to is
// a loopback address: bench writes and deletes freely, so it must never reach
// a shared server.
func checkLoopbackHost(ctx context.Context, host string) error {
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("host %s is not a loopback address; bench only talks to loopback", host)
		}
		return nil
	}
	lookupCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(lookupCtx, host)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("host %s resolves to nothing", host)
	}
	for _, addr := range addrs {
		if !addr.IP.IsLoopback() {
			return fmt.Errorf("host %s resolves to %s, not a loopback address; bench only talks to loopback", host, addr.IP)
		}
	}
	return nil
}

// redact hides a URL's password.
func redact(rawURL string) string {
	parsed, err := url.Parse(rawURL)
	if err != nil {
		return "<unparseable URL>"
	}
	return parsed.Redacted()
}

// childEnv is the environment of a graphsync subprocess: bench's own minus
// every GRAPHSYNC_ setting (so a stray GRAPHSYNC_WAKE cannot change what is
// measured), plus the connection settings. Credentials go through the
// environment, not the command line, where ps would show them.
func (s *stack) childEnv(pgURL string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRAPHSYNC_") {
			env = append(env, kv)
		}
	}
	return append(env,
		envPostgresURL+"="+pgURL,
		envNeo4jURI+"="+s.neo4jURI,
		envNeo4jUser+"="+s.neo4jUser,
		envNeo4jPassword+"="+s.neo4jPassword,
	)
}

// scenarioDB is one scenario's fresh PostgreSQL database.
type scenarioDB struct {
	name string
	url  string
	// slot names the stream mode's slot and publication: slots are
	// cluster-wide, so each scenario has its own.
	slot string
	pool *pgxpool.Pool
}

func randomHex(bytes int) string {
	b := make([]byte, bytes)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createDatabase creates a database named after the scenario, migrates it
// with `graphsync migrate`, and starts its ids at a random base.
func (s *stack) createDatabase(ctx context.Context, scenario string) (*scenarioDB, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	suffix := randomHex(5)
	db := &scenarioDB{name: databasePrefix + scenario + "_" + suffix, slot: databasePrefix + suffix}
	if err := s.adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{db.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", db.name, err)
	}
	dbURL, err := withDatabase(s.adminURL, db.name)
	if err != nil {
		return db, err
	}
	db.url = dbURL
	migrate := exec.CommandContext(ctx, s.binary, "migrate")
	migrate.Env = s.childEnv(db.url)
	if output, err := migrate.CombinedOutput(); err != nil {
		return db, fmt.Errorf("graphsync migrate %s: %w\n%s", db.name, err, output)
	}
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return db, fmt.Errorf("parse %s: %w", redact(db.url), err)
	}
	cfg.MaxConns = 16
	cfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	db.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return db, fmt.Errorf("connect to %s: %w", redact(db.url), err)
	}
	base, err := rand.Int(rand.Reader, big.NewInt(idBaseMax-idBaseMin))
	if err != nil {
		return db, fmt.Errorf("random id base: %w", err)
	}
	if _, err := db.pool.Exec(ctx, query("ids_restart"), base.Int64()+idBaseMin); err != nil {
		return db, fmt.Errorf("restart ids of %s: %w", db.name, err)
	}
	return db, nil
}

// dropDatabase closes bench's pool and drops the database, its replication
// slots first (PostgreSQL refuses to drop a database that has one).
func (s *stack) dropDatabase(ctx context.Context, db *scenarioDB) error {
	if db == nil {
		return nil
	}
	if db.pool != nil {
		db.pool.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(s.adminURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pollUntil(ctx, 50*time.Millisecond, "replication slots of "+db.name+" to go", func(ctx context.Context) (bool, error) {
		var actedOn int
		if err := conn.QueryRow(ctx, query("slots_drop"), db.name).Scan(&actedOn); err != nil {
			return false, fmt.Errorf("drop replication slots: %w", err)
		}
		return actedOn == 0, nil
	})
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", db.name, err)
	}
	return nil
}

func (s *stack) adminExec(ctx context.Context, statement string) error {
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(s.adminURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, statement)
	return err
}

// withDatabase returns rawURL pointing at database name instead.
func withDatabase(rawURL, name string) (string, error) {
	parsed, err := url.Parse(rawURL)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", errors.New(envPostgresURL + " must be a postgres:// URL")
	}
	parsed.Path = "/" + name
	parsed.RawPath = ""
	return parsed.String(), nil
}

// pollUntil calls check every interval until it reports done, fails, or ctx
// ends (the caller's deadline); what names the condition in the error.
func pollUntil(ctx context.Context, interval time.Duration, what string, check func(context.Context) (bool, error)) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		done, err := check(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			}
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-ticker.C:
		}
	}
}

// graphCounts are the nodes per label and relationships per type of some
// tenants.
type graphCounts struct {
	Nodes         map[string]int64 `json:"nodes"`
	Relationships map[string]int64 `json:"relationships"`
}

func (g graphCounts) equal(other graphCounts) bool {
	return mapsEqual(g.Nodes, other.Nodes) && mapsEqual(g.Relationships, other.Relationships)
}

func (g graphCounts) String() string {
	var nodes, rels int64
	for _, n := range g.Nodes {
		nodes += n
	}
	for _, n := range g.Relationships {
		rels += n
	}
	return fmt.Sprintf("%d nodes %v, %d relationships %v", nodes, g.Nodes, rels, g.Relationships)
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// countGraph counts the nodes and relationships of tenantIDs.
func (s *stack) countGraph(ctx context.Context, tenantIDs []int64) (graphCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	counts := graphCounts{Nodes: map[string]int64{}, Relationships: map[string]int64{}}
	params := map[string]any{"ids": tenantIDs}
	for _, q := range []struct {
		text string
		into map[string]int64
	}{
		{`MATCH (n) WHERE n.tenant_id IN $ids RETURN head(labels(n)) AS key, count(*) AS n`, counts.Nodes},
		{`MATCH (a)-[r]->() WHERE a.tenant_id IN $ids RETURN type(r) AS key, count(*) AS n`, counts.Relationships},
	} {
		result, err := neo4j.ExecuteQuery(ctx, s.driver, q.text, params, neo4j.EagerResultTransformer)
		if err != nil {
			return counts, fmt.Errorf("count graph of tenants %v: %w", tenantIDs, err)
		}
		for _, record := range result.Records {
			key, _, err := neo4j.GetRecordValue[string](record, "key")
			if err != nil {
				return counts, err
			}
			n, _, err := neo4j.GetRecordValue[int64](record, "n")
			if err != nil {
				return counts, err
			}
			q.into[key] = n
		}
	}
	return counts, nil
}

// cleanGraph deletes every node and relationship of tenantIDs: relationships
// first, so that no inner transaction has to detach a product from thousands
// of order lines at once.
func (s *stack) cleanGraph(ctx context.Context, tenantIDs []int64) error {
	if len(tenantIDs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	session := s.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer session.Close(context.WithoutCancel(ctx))
	params := map[string]any{"ids": tenantIDs}
	// CALL ... IN TRANSACTIONS needs an auto-commit transaction (session.Run).
	for _, statement := range []string{
		fmt.Sprintf(`MATCH (n)-[r]->() WHERE n.tenant_id IN $ids
		 CALL { WITH r DELETE r } IN TRANSACTIONS OF %d ROWS`, cleanBatchRows),
		fmt.Sprintf(`MATCH (n) WHERE n.tenant_id IN $ids
		 CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF %d ROWS`, cleanBatchRows),
	} {
		result, err := session.Run(ctx, statement, params)
		if err == nil {
			_, err = result.Consume(ctx)
		}
		if err != nil {
			return fmt.Errorf("clean graph of tenants %v: %w", tenantIDs, err)
		}
	}
	return nil
}

// neo4jVersion is the server's version and edition, for the results.
func (s *stack) neo4jVersion(ctx context.Context) string {
	result, err := neo4j.ExecuteQuery(ctx, s.driver,
		`CALL dbms.components() YIELD versions, edition RETURN versions[0] + ' ' + edition AS version`,
		nil, neo4j.EagerResultTransformer)
	if err != nil || len(result.Records) == 0 {
		return "unknown"
	}
	version, _, _ := neo4j.GetRecordValue[string](result.Records[0], "version")
	return version
}

// buildBinary builds graphsync from the working tree at root.
func buildBinary(ctx context.Context, root, binary string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/graphsync")
	build.Dir = root
	var output bytes.Buffer
	build.Stdout, build.Stderr = &output, &output
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build -o %s ./cmd/graphsync: %w\n%s", binary, err, output.String())
	}
	return nil
}

// repoRoot is the nearest directory above the working directory holding
// graphsync's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		body, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(body, []byte("module graphsync\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module graphsync above the working directory: run bench from the repository")
		}
		dir = parent
	}
}
