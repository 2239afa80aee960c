package cypher

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"graphsync/graphmodel"
)

func TestBatchText(t *testing.T) {
	golden(t, "onequery", newBuilder(t).BatchText())
}

// Batch keeps StatementsOf's statements, their order and their rows: each
// statement's rows sit under the key its subquery reads, every key the text
// reads is filled (Neo4j reads a missing key as null, and UNWIND null
// writes nothing, silently), and each counted statement expects what
// StatementsOf said.
func TestBatchCarriesEveryStatement(t *testing.T) {
	b := newBuilder(t)
	stmts, err := b.Statements(sampleMutations())
	if err != nil {
		t.Fatal(err)
	}
	batch, err := b.Batch(stmts)
	if err != nil {
		t.Fatal(err)
	}
	if batch.Text != b.BatchText() {
		t.Fatal("a batch's text differs from BatchText: Neo4j would plan it apart")
	}
	rows := batch.Params[batchParam].(map[string]any)
	read := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$batch\.(s\d+)\b`).FindAllStringSubmatch(batch.Text, -1) {
		read[m[1]] = true
		if _, ok := rows[m[1]]; !ok {
			t.Errorf("the text reads $batch.%s, which Batch does not fill", m[1])
		}
	}
	if len(read) != len(rows) || len(rows) != len(b.Texts()) {
		t.Errorf("the text reads %d keys, Batch fills %d, the builder has %d statements", len(read), len(rows), len(b.Texts()))
	}
	// The statements' subqueries, in the statements' order.
	last := -1
	for _, stmt := range stmts {
		i := b.batch.slot[stmt.Text]
		if got := rows[slotKey(i)]; !reflect.DeepEqual(got, stmt.Params["rows"]) {
			t.Errorf("slot %d holds %v, want the statement's rows %v", i, got, stmt.Params["rows"])
		}
		at := strings.Index(batch.Text, "$batch."+slotKey(i)+" ")
		if at <= last {
			t.Errorf("statement %d comes before the one it follows:\n%s", i, stmt.Text)
		}
		last = at
	}
	var want []int
	for _, i := range b.batch.counted {
		expect := 0
		for _, stmt := range stmts {
			if b.batch.slot[stmt.Text] == i {
				expect = stmt.Expect
			}
		}
		want = append(want, expect)
	}
	if !reflect.DeepEqual(batch.Expect, want) {
		t.Errorf("expect %v, want %v", batch.Expect, want)
	}
	if len(want) == 0 || slices.Max(want) == 0 {
		t.Error("the sample counts no relationship: the test proves nothing about Expect")
	}
	// A batch of one statement: every other key the text reads is there,
	// an empty list.
	one, err := b.Batch(stmts[:1])
	if err != nil {
		t.Fatal(err)
	}
	oneRows := one.Params[batchParam].(map[string]any)
	own := slotKey(b.batch.slot[stmts[0].Text])
	for key := range read {
		got, ok := oneRows[key]
		if !ok {
			t.Errorf("a batch of one statement leaves $batch.%s unfilled", key)
			continue
		}
		if list, isList := got.([]any); key != own && (!isList || len(list) != 0) {
			t.Errorf("a batch of one statement fills $batch.%s with %v", key, got)
		}
	}
	// A statement the builder does not have is refused, not dropped.
	if _, err := b.Batch([]Statement{{Text: "UNWIND $rows AS row RETURN row"}}); err == nil {
		t.Error("Batch took a statement the builder does not have")
	}
}

// Batches splits a statement over the row bound into chunks of consecutive
// rows and keeps the order statements run in: read batch by batch, slot by
// slot, the rows are the statements' rows in the statements' order, no
// statement sends more than the bound, and the expected counts add up.
func TestBatchesSplitLargeStatementsInOrder(t *testing.T) {
	b := newBuilder(t)
	mut := sampleMutations()
	for line := int64(2); line <= 23; line++ { // one order of 23 lines
		mut.Rels = append(mut.Rels, graphmodel.RelUpsert{Type: graphmodel.RelContains, TenantID: 1, FromID: 9, ToID: 7, OutboxID: 12,
			Props: map[string]any{"line_no": line, "quantity": int64(1), "unit_price_cents": int64(5)}})
	}
	stmts, err := b.Statements(mut)
	if err != nil {
		t.Fatal(err)
	}
	const maxRows = 5
	batches, err := b.batches(stmts, maxRows)
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) < 5 {
		t.Fatalf("%d batches for 23 CONTAINS rows at %d rows a statement: the statement was not split", len(batches), maxRows)
	}
	// What runs, in the order it runs: per batch, the slots in text order.
	type piece struct {
		text string
		rows []any
	}
	var ran []piece
	for _, batch := range batches {
		if batch.Text != b.BatchText() {
			t.Fatal("a batch's text differs from BatchText")
		}
		slots := batch.Params[batchParam].(map[string]any)
		for _, text := range b.Texts() {
			rows := slots[slotKey(b.batch.slot[text])].([]any)
			if len(rows) > maxRows {
				t.Errorf("a statement sends %d rows, over the bound of %d", len(rows), maxRows)
			}
			if len(rows) > 0 {
				if n := len(ran); n > 0 && ran[n-1].text == text {
					ran[n-1].rows = append(ran[n-1].rows, rows...)
				} else {
					ran = append(ran, piece{text, rows})
				}
			}
		}
	}
	if len(ran) != len(stmts) {
		t.Fatalf("%d runs of statements, want the %d statements once each, in order", len(ran), len(stmts))
	}
	for i, stmt := range stmts {
		if ran[i].text != stmt.Text || !reflect.DeepEqual(ran[i].rows, stmt.Params["rows"]) {
			t.Errorf("statement %d runs out of order or with other rows:\n%s", i, stmt.Text)
		}
	}
	want, got := 0, 0
	for _, stmt := range stmts {
		want += max(stmt.Expect, 0)
	}
	for _, batch := range batches {
		for _, e := range batch.Expect {
			got += max(e, 0)
		}
	}
	if got != want || want < 23 {
		t.Errorf("the batches expect %d rows in all, the statements %d", got, want)
	}
}

// The row path's chunks: consecutive rows, in order, at most StatementRows
// each, nothing lost; a list within the bound is one chunk.
func TestRowChunksKeepRowsInOrderWithinTheBound(t *testing.T) {
	for _, n := range []int{0, 1, StatementRows, StatementRows + 1, 2*StatementRows + 7} {
		rows := make([]int, n)
		for i := range rows {
			rows[i] = i
		}
		chunks := RowChunks(rows, StatementRows)
		next := 0
		for _, c := range chunks {
			if len(c) > StatementRows || (len(c) == 0 && n > 0) {
				t.Errorf("%d rows: a chunk of %d", n, len(c))
			}
			for _, r := range c {
				if r != next {
					t.Fatalf("%d rows: row %d where %d comes next", n, r, next)
				}
				next++
			}
		}
		if next != n || len(chunks) != max(1, (n+StatementRows-1)/StatementRows) {
			t.Errorf("%d rows: %d rows in %d chunks", n, next, len(chunks))
		}
	}
}
