package drift

import (
	"fmt"
	"strings"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j/dbtype"

	"graphsync/graphmodel"
)

// Kind is a kind of drift.
type Kind string

// Kinds of drift. Foreign labels and types are reported, not counted as
// drift (other data may share the database), and never repaired.
const (
	MissingNode         Kind = "missing_node"
	OrphanNode          Kind = "orphan_node"
	StaleNode           Kind = "stale_node"
	MissingRelationship Kind = "missing_relationship"
	ExtraRelationship   Kind = "extra_relationship"
	ChangedRelationship Kind = "changed_relationship"
	CrossTenant         Kind = "cross_tenant_relationship"
	// NodeWithoutTenant: a node of a projected label whose tenant_id is
	// missing or not an integer: no tenant's.
	NodeWithoutTenant Kind = "node_without_tenant"
	// NodeWithoutID: a node of a projected label whose id is missing or not
	// a positive integer. No row implies it, and no chunk (read in id order
	// from 0) sees it.
	NodeWithoutID      Kind = "node_without_id"
	PropertyNotAllowed Kind = "property_not_allowed"
	// ReferenceStampAhead: a reference node (a Category, a Customer) whose
	// stamps no event can pass: a sync_outbox_id above every id the outbox
	// sequence has drawn (PostgreSQL restored from a backup), a
	// sync_version other than the 0 sync writes them with, or a stamp that
	// is not an integer (set by hand). Sync's guard drops every later event
	// that writes the node, so pending events never explain it.
	ReferenceStampAhead Kind = "reference_stamp_ahead"
	PersonalData        Kind = "personal_data"
	ForeignLabel        Kind = "foreign_label"
	ForeignRelType      Kind = "foreign_relationship_type"
	// The vector kinds (Config.Vectors): a node of the embedded label
	// without a vector; with a vector of another text than the one its
	// rows imply; of another model; of another dimension. Their repair
	// marks the node pending for the embedding stage (ADR 0023).
	MissingEmbedding        Kind = "missing_embedding"
	StaleEmbedding          Kind = "stale_embedding"
	WrongEmbeddingModel     Kind = "wrong_embedding_model"
	WrongEmbeddingDimension Kind = "wrong_embedding_dimension"
)

// Kinds lists the drift kinds in report order.
var Kinds = []Kind{MissingNode, OrphanNode, StaleNode, MissingRelationship, ExtraRelationship, ChangedRelationship,
	CrossTenant, NodeWithoutTenant, NodeWithoutID, PropertyNotAllowed, PersonalData, ReferenceStampAhead,
	MissingEmbedding, StaleEmbedding, WrongEmbeddingModel, WrongEmbeddingDimension}

// Finding is one difference.
type Finding struct {
	Kind     Kind   `json:"kind"`
	TenantID int64  `json:"tenant_id"`
	Label    string `json:"label"`
	ID       int64  `json:"id"`
	// Detail says what differs: keys and values, personal data masked.
	Detail string `json:"detail"`
	// Count is how many this finding stands for (1, or more for a summary
	// such as the nodes of a tenant PostgreSQL does not have).
	Count int `json:"count"`
	// repair is what fixes it; nil when it is not repairable.
	repair *repairAction
}

// Explained is an aggregate whose difference is explained by outbox rows
// not applied yet.
type Explained struct {
	TenantID int64  `json:"tenant_id"`
	Label    string `json:"label"`
	ID       int64  `json:"id"`
	Pending  int64  `json:"pending"`
	DLQ      int64  `json:"dlq"`
	Detail   string `json:"detail"`
}

// personalData names what a value looks like ("an e-mail address", "a phone
// number"), or "". A list (Neo4j's array properties) is personal data when
// any of its texts is.
func personalData(v any) string {
	switch x := v.(type) {
	case string:
		return graphmodel.PersonalData(x)
	case []any:
		for _, item := range x {
			if what := personalData(item); what != "" {
				return what
			}
		}
	}
	return ""
}

// valueKind names the kind of a value ("text of 12 characters", "an
// integer", "a list of 3"), which is all a report says of a property outside
// the allowlist: its value is no fact the projection vouches for and may be
// anything (a name, a birth date) that no report may carry.
func valueKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("text of %d characters", len([]rune(x)))
	case int64, int:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return fmt.Sprintf("a list of %d", len(x))
	case []byte:
		return fmt.Sprintf("%d bytes", len(x))
	case dbtype.Date:
		return "a date"
	case dbtype.LocalDateTime:
		return "a local datetime"
	case time.Time:
		return "a datetime"
	case dbtype.LocalTime, dbtype.Time:
		return "a time"
	case dbtype.Duration:
		return "a duration"
	case dbtype.Point2D, dbtype.Point3D:
		return "a point"
	}
	return "a value"
}

// show renders a value for a report: personal data masked, long text cut.
// Only for values of the allowlist: see valueKind for any other.
func show(v any) string {
	if v == nil {
		return "null"
	}
	if what := personalData(v); what != "" {
		return fmt.Sprintf("<masked: %s>", what)
	}
	s := fmt.Sprint(v)
	if str, ok := v.(string); ok {
		s = fmt.Sprintf("%q", str)
	}
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	return s
}
