package cypher

import (
	"fmt"
	"strings"
)

// Batch is a write transaction's statements as one query, so that Neo4j
// sees one round trip instead of one per statement: every statement the
// builder has (Texts), in its fixed order, as a CALL subquery, each reading
// its rows from one entry of the single map parameter $batch (an empty list
// for the statements this batch does not need, which then do nothing). The
// text is the same for every batch: Neo4j plans it once (Projector.WarmUp)
// whatever the batch holds, and a map parameter, unlike a list, has no
// size classes to plan apart (docs/adr/0013).
type Batch struct {
	Text   string
	Params map[string]any
	// Expect holds, for each entry of the query's single "applied" list
	// column, how many rows that statement must report (Statement.Expect).
	Expect []int
}

// batchText is the builder's Batch query, made once in NewBuilder.
type batchText struct {
	text    string
	slot    map[string]int // statement text -> its key's index, "s<index>"
	counted []int          // the slots that report "applied", in list order
}

const (
	batchParam   = "batch"
	appliedAlias = "applied"
	countedTail  = "\nRETURN count(*) AS " + appliedAlias
)

func slotKey(i int) string { return fmt.Sprintf("s%d", i) }

func newBatchText(texts []string) batchText {
	bt := batchText{slot: map[string]int{}}
	var sb strings.Builder
	var applied []string
	for i, text := range texts {
		bt.slot[text] = i
		body := strings.ReplaceAll(text, "$rows", "$"+batchParam+"."+slotKey(i))
		if strings.HasSuffix(body, countedTail) {
			alias := appliedAlias + "_" + slotKey(i)
			body = strings.TrimSuffix(body, countedTail) + "\nRETURN count(*) AS " + alias
			applied = append(applied, alias)
			bt.counted = append(bt.counted, i)
		}
		fmt.Fprintf(&sb, "CALL {\n%s\n}\n", body)
	}
	fmt.Fprintf(&sb, "RETURN [%s] AS %s", strings.Join(applied, ", "), appliedAlias)
	bt.text = sb.String()
	return bt
}

// Batch packs statements of this builder (StatementsOf's) into one query;
// they keep their order, which is the builder's. It fails on a statement
// the builder does not have.
func (b *Builder) Batch(stmts []Statement) (Batch, error) {
	rows := make(map[string]any, len(b.batch.slot))
	for _, i := range b.batch.slot {
		rows[slotKey(i)] = []any{}
	}
	expect := map[int]int{}
	for _, stmt := range stmts {
		i, ok := b.batch.slot[stmt.Text]
		if !ok {
			return Batch{}, fmt.Errorf("cypher: batch: a statement this builder does not have:\n%s", stmt.Text)
		}
		rows[slotKey(i)] = stmt.Params["rows"]
		expect[i] = stmt.Expect
	}
	out := Batch{Text: b.batch.text, Params: map[string]any{batchParam: rows}, Expect: make([]int, len(b.batch.counted))}
	for n, i := range b.batch.counted {
		out.Expect[n] = expect[i] // 0 when the statement had no rows
	}
	return out, nil
}

// StatementRows bounds the rows one statement of a Batch sends in its
// UNWIND list. A batch holding more (the CONTAINS rows of a 5,000-line
// order beside other orders) is sent as several Batch queries in one
// transaction (Batches), so one query's parameters and the rows Neo4j
// buffers for it stay bounded whatever the size of an event; the
// transaction stays all or nothing (docs/adr/0026-large-events.md).
const StatementRows = 5000

// RowChunks splits rows into consecutive chunks of at most size rows
// (StatementRows, the bound of one statement's UNWIND list, outside tests):
// the row path (drift's repair, the rebuild's snapshot) runs a statement
// once per chunk, in order, as Batches splits the event path's.
func RowChunks[T any](rows []T, size int) [][]T {
	size = max(size, 1)
	if len(rows) <= size {
		return [][]T{rows}
	}
	out := make([][]T, 0, (len(rows)+size-1)/size)
	for len(rows) > size {
		out = append(out, rows[:size])
		rows = rows[size:]
	}
	return append(out, rows)
}

// Batches is Batch for statements of any size: it packs them into as few
// queries as it can with at most StatementRows rows per statement, to run
// in order in one transaction. A statement over the bound is split into
// chunks of consecutive rows; the statements after it go with its last
// chunk, so the order they run in is the order of stmts, as with one query.
func (b *Builder) Batches(stmts []Statement) ([]Batch, error) {
	return b.batches(stmts, StatementRows)
}

func (b *Builder) batches(stmts []Statement, maxRows int) ([]Batch, error) {
	var out []Batch
	var current []Statement
	flush := func() error {
		batch, err := b.Batch(current)
		if err != nil {
			return err
		}
		out = append(out, batch)
		current = nil
		return nil
	}
	for _, stmt := range stmts {
		rows, _ := stmt.Params["rows"].([]any)
		for len(rows) > maxRows {
			current = append(current, chunkOf(stmt, rows[:maxRows]))
			if err := flush(); err != nil {
				return nil, err
			}
			rows = rows[maxRows:]
		}
		if len(rows) < len(stmtRows(stmt)) {
			stmt = chunkOf(stmt, rows)
		}
		current = append(current, stmt)
	}
	if len(current) > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func stmtRows(stmt Statement) []any {
	rows, _ := stmt.Params["rows"].([]any)
	return rows
}

// chunkOf is stmt with only rows, expecting as many as it holds when stmt
// expects all of its rows.
func chunkOf(stmt Statement, rows []any) Statement {
	expect := stmt.Expect
	if expect >= 0 {
		expect = len(rows)
	}
	return Statement{Text: stmt.Text, Params: map[string]any{"rows": rows}, Expect: expect}
}

// BatchText is the query every Batch sends.
func (b *Builder) BatchText() string { return b.batch.text }
