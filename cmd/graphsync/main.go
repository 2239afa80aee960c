// Command graphsync keeps a Neo4j graph in step with a multi-tenant
// PostgreSQL commerce database through its transactional outbox.
//
//	graphsync migrate            apply PostgreSQL migrations and Neo4j constraints
//	graphsync sync               the continuous sync service
//	graphsync demo               write a demo workload, sync it, print a summary
//	graphsync summary            print what PostgreSQL and Neo4j hold, per tenant
//	graphsync dlq list|retry|discard
//	graphsync retention          archive processed rows, keep archive partitions
//	graphsync stream drop        drop the stream mode's slot and publication
//	graphsync notify enable|disable
//	graphsync context --tenant N "question"   tenant-safe GraphRAG context
//	graphsync drift [--repair]   the boundary review: PostgreSQL against the graph
//	graphsync mcp [--tenant N | --http ADDR]   the tenant graph as MCP tools
//	graphsync mcp token create|list|revoke --tenant N
//	graphsync rebuild [--tenant N] [--source auto|replay|snapshot]
//	                             the graph from PostgreSQL, while sync runs
//
// Every flag has an environment variable (GRAPHSYNC_<FLAG>, upper-case,
// dashes as underscores); a flag given on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"graphsync/embed"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"migrate":   {"apply PostgreSQL migrations and Neo4j constraints (idempotent)", runMigrate},
	"sync":      {"run the continuous sync service", runSync},
	"demo":      {"write a demo workload, sync it until caught up, print a summary", runDemo},
	"summary":   {"print what PostgreSQL and Neo4j hold, per tenant", runSummary},
	"dlq":       {"dead letters: list, retry IDS..., discard IDS...", runDLQ},
	"retention": {"archive processed rows and keep archive partitions", runRetention},
	"stream":    {"stream drop: drop the replication slot and publication", runStream},
	"notify":    {"notify enable|disable: the outbox NOTIFY trigger", runNotify},
	"context":   {"print the graph context of a question for one tenant (GraphRAG retrieval)", runContext},
	"drift":     {"compare PostgreSQL with the graph per tenant and label; --repair fixes what it finds", runDrift},
	"mcp":       {"serve the tenant graph to LLM agents over MCP (stdio, or --http with bearer tokens); mcp token create|list|revoke", runMCP},
	"rebuild":   {"rebuild the graph (or --tenant N) from PostgreSQL by replay or snapshot, while sync runs; resumable", runRebuild},
}

func main() {
	// Sync's model process is this binary started again (ADR 0032).
	embed.ServeWorkerIfAsked()
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "graphsync: unknown command %q\n", args[0])
		usage()
		return 2
	}
	ctx := context.Background()
	if err := cmd.run(ctx, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var exitErr exitError
		if errors.As(err, &exitErr) {
			if exitErr.msg != "" {
				fmt.Fprintf(os.Stderr, "graphsync %s: %s\n", args[0], exitErr.msg)
			}
			return exitErr.code
		}
		var usageErr usageError
		if errors.As(err, &usageErr) {
			fmt.Fprintf(os.Stderr, "graphsync %s: %v\n", args[0], err)
			return 2
		}
		fmt.Fprintf(os.Stderr, "graphsync %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// exitError ends a command with a given exit code and, unless empty, one
// line on standard error.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// usageError marks a mistake in how the command was called (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usage() {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: graphsync <command> [flags]\n\ncommands:\n")
	for _, name := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", name, commands[name].summary)
	}
	b.WriteString("\nRun graphsync <command> -h for its flags. Every flag can also be set as GRAPHSYNC_<FLAG>.\n")
	fmt.Fprint(os.Stderr, b.String())
}
