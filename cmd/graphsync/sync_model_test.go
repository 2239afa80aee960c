package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap/zaptest"

	"graphsync/graphmodel"
	"graphsync/internal/proctest"
	"graphsync/internal/stacktest"
	"graphsync/workload"
)

// Sync embeds in a model process of its own (ADR 0032): every product
// gets its vector, the model process is the leader of its own session at
// nice 19, and it ends when sync is killed (it reads the end of its input),
// leaving nothing running.
func TestSyncEmbedsInAModelProcessThatEndsWithIt(t *testing.T) {
	ctx := context.Background()
	pgURL, pool := stacktest.FreshDatabase(t)
	driver := stacktest.Neo4j(t)
	report, err := workload.Run(ctx, pool, workload.Config{Seed: 23, Tenants: 1, Orders: 6, Writers: 1,
		ProductsPerTenant: 8, CustomersPerTenant: 4}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	tenant := report.TenantIDs[0]
	t.Cleanup(func() { stacktest.CleanGraph(t, driver, tenant) })
	sync := startMain(t, []string{"sync", "--http-addr=", "--wake", "poll", "--poll-interval", "50ms", "--retention-every", "0",
		"--log-level", "error", "--embedder", "onnx", "--pg-url", pgURL, "--neo4j-uri", stacktest.Neo4jURI(t)})

	var products, embedded int64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res, err := neo4j.ExecuteQuery(ctx, driver, fmt.Sprintf("MATCH (p:Product {%s: $tenant}) RETURN count(p) AS products, "+
			"count(CASE WHEN size(p.%s) = 384 AND p.%s IS NULL THEN 1 END) AS embedded",
			graphmodel.KeyTenantID, graphmodel.PropEmbedding, graphmodel.Default.Embedding.PendingProperty),
			map[string]any{"tenant": tenant}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		products, _, _ = neo4j.GetRecordValue[int64](res.Records[0], "products")
		embedded, _, _ = neo4j.GetRecordValue[int64](res.Records[0], "embedded")
		if products == 8 && embedded == products {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d products embedded within 2 minutes", embedded, products)
		}
		<-time.After(50 * time.Millisecond)
	}

	model := childrenOf(t, sync.Process.Pid)
	if len(model) != 1 {
		t.Fatalf("sync has %d child processes, want its model process", len(model))
	}
	stat := procStat(t, model[0])
	if sid, _ := strconv.Atoi(stat[proctest.Session]); sid != model[0] {
		t.Errorf("the model process is in session %d, want a session of its own", sid)
	}
	if nice, _ := strconv.Atoi(stat[proctest.Nice]); nice != 19 {
		t.Errorf("the model process runs at nice %d, want 19", nice)
	}

	if err := sync.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		fields, err := procStatFields(model[0])
		if os.IsNotExist(err) || (err == nil && fields[proctest.State] == "Z") {
			break // gone, or a zombie nobody reaps here
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(model[0], syscall.SIGKILL)
			t.Fatalf("the model process %d still runs 30s after sync was killed", model[0])
		}
		<-time.After(20 * time.Millisecond)
	}
	_ = sync.Wait()
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var children []int
	for _, path := range stats {
		child, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		fields, err := procStatFields(child)
		if err != nil {
			continue // ended since the glob
		}
		if parent, _ := strconv.Atoi(fields[proctest.Parent]); parent == pid {
			children = append(children, child)
		}
	}
	return children
}

func procStat(t *testing.T, pid int) []string {
	t.Helper()
	fields, err := procStatFields(pid)
	if err != nil {
		t.Fatal(err)
	}
	return fields
}

func procStatFields(pid int) ([]string, error) {
	return proctest.StatFields(fmt.Sprintf("/proc/%d/stat", pid))
}
