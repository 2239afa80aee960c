package projector

import (
	"reflect"
	"unsafe"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/db"
)

// planOperators lists every operator of an EXPLAIN plan, depth first.
//
// The driver's Plan.Children (v5.28, a module on go 1.18 semantics) takes the
// address of its range variable, so every child it returns is the last one
// and an Apply's left side is lost. The operators are therefore read from the
// db.Plan the wrapper holds, whose Children slice is right.
func planOperators(plan neo4j.Plan) []string {
	if plan == nil {
		return nil
	}
	v := reflect.ValueOf(plan)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if field := v.Elem().FieldByName("plan"); field.IsValid() && field.Type() == reflect.TypeOf((*db.Plan)(nil)) {
			return dbPlanOperators((*db.Plan)(unsafe.Pointer(field.Pointer())))
		}
	}
	panic("planOperators: the driver's Plan no longer wraps a *db.Plan; use Children() if its aliasing bug is fixed")
}

func dbPlanOperators(plan *db.Plan) []string {
	ops := []string{plan.Operator}
	for k := range plan.Children {
		ops = append(ops, dbPlanOperators(&plan.Children[k])...)
	}
	return ops
}
