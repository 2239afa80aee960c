package projector

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/db"
)

// planOperators lists every operator of an EXPLAIN plan, depth first.
func planOperators(plan neo4j.Plan) []string {
	var ops []string
	walkPlan(plan, func(p *db.Plan) { ops = append(ops, p.Operator) })
	return ops
}

// planSteps lists every operator of an EXPLAIN plan with its details
// ("NodeIndexSeek@neo4j RANGE INDEX a:Product(id) WHERE id = row.from_id"),
// depth first.
func planSteps(plan neo4j.Plan) []string {
	var steps []string
	walkPlan(plan, func(p *db.Plan) { steps = append(steps, fmt.Sprintf("%s %v", p.Operator, p.Arguments["Details"])) })
	return steps
}

// walkPlan visits every operator of plan, depth first.
//
// The driver's Plan.Children (v5.28, a module on go 1.18 semantics) takes the
// address of its range variable, so every child it returns is the last one
// and an Apply's left side is lost. The operators are therefore read from the
// db.Plan the wrapper holds, whose Children slice is right.
func walkPlan(plan neo4j.Plan, visit func(*db.Plan)) {
	if plan == nil {
		return
	}
	v := reflect.ValueOf(plan)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if field := v.Elem().FieldByName("plan"); field.IsValid() && field.Type() == reflect.TypeOf((*db.Plan)(nil)) {
			walkDBPlan((*db.Plan)(unsafe.Pointer(field.Pointer())), visit)
			return
		}
	}
	panic("walkPlan: the driver's Plan no longer wraps a *db.Plan; use Children() if its aliasing bug is fixed")
}

func walkDBPlan(plan *db.Plan, visit func(*db.Plan)) {
	visit(plan)
	for k := range plan.Children {
		walkDBPlan(&plan.Children[k], visit)
	}
}

// explainOnNoRows is the EXPLAIN plan of a statement that unwinds $rows,
// planned on an empty list (it reads and writes nothing).
func explainOnNoRows(t *testing.T, driver neo4j.DriverWithContext, text string) neo4j.Plan {
	t.Helper()
	res, err := neo4j.ExecuteQuery(context.Background(), driver, "EXPLAIN "+text, map[string]any{"rows": []any{}}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", text, err)
	}
	return res.Summary.Plan()
}
