package drift

import (
	"fmt"
	"strings"

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
	NodeWithoutTenant   Kind = "node_without_tenant"
	// NodeWithoutID: a node of a projected label whose id is missing or not
	// a positive integer. No row implies it, and no chunk (read in id order
	// from 0) sees it.
	NodeWithoutID      Kind = "node_without_id"
	PropertyNotAllowed Kind = "property_not_allowed"
	PersonalData       Kind = "personal_data"
	ForeignLabel       Kind = "foreign_label"
	// The vector kinds (Config.Vectors): a node of the embedded label
	// without a vector; with a vector of another text than the one its
	// rows imply; of another model; of another dimension. Their repair
	// marks the node pending for the embedding stage (ADR 0023).
	MissingEmbedding        Kind = "missing_embedding"
	StaleEmbedding          Kind = "stale_embedding"
	WrongEmbeddingModel     Kind = "wrong_embedding_model"
	WrongEmbeddingDimension Kind = "wrong_embedding_dimension"
	ForeignRelType          Kind = "foreign_relationship_type"
)

// Kinds lists the drift kinds in report order.
var Kinds = []Kind{MissingNode, OrphanNode, StaleNode, MissingRelationship, ExtraRelationship, ChangedRelationship,
	CrossTenant, NodeWithoutTenant, NodeWithoutID, PropertyNotAllowed, PersonalData,
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

// show renders a value for a report: personal data masked, long text cut.
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
