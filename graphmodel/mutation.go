package graphmodel

// Mutations are the graph writes one batch of events asks for, in model terms.
// The projector produces them from events (pure); the cypher package turns
// them into statements (pure). Values come from events; labels, types and
// property keys must come from the Model, which the cypher package enforces.
type Mutations struct {
	Nodes   []NodeUpsert
	Deletes []NodeDelete
	Rels    []RelUpsert
}

// Guard orders the writes to one node: a write applies only if its
// (Version, OutboxID) is greater than the node's (sync_version,
// sync_outbox_id). Version is 0 for nodes that are not aggregates.
type Guard struct {
	Version  int64
	OutboxID int64
}

// Newer reports whether g orders after other.
func (g Guard) Newer(other Guard) bool {
	if g.Version != other.Version {
		return g.Version > other.Version
	}
	return g.OutboxID > other.OutboxID
}

// NodeUpsert merges the node (Label, TenantID, ID) and, if Guard is newer than
// the node's, sets every allowlisted property of the label from Props (a key
// that is absent or nil removes the property).
type NodeUpsert struct {
	Label    string
	TenantID int64
	ID       int64
	Guard    Guard
	Props    map[string]any
}

// NodeDelete removes an aggregate's node and leaves its tombstone; later
// upserts of the same node are no-ops.
type NodeDelete struct {
	Label    string
	TenantID int64
	ID       int64
	Guard    Guard
}

// RelUpsert merges a relationship between two nodes of one tenant.
//
// For a Single relationship type, it applies only if the From node's
// sync_outbox_id equals OutboxID (the event that wrote the node also decides
// its relationship), and replaces any other relationship of that type from the
// node; ToID 0 only removes. Otherwise the relationship is a fact, merged
// whatever the nodes' versions.
type RelUpsert struct {
	Type     string
	TenantID int64
	FromID   int64
	ToID     int64
	OutboxID int64
	// Props holds the relationship's key and allowlisted properties.
	Props map[string]any
}
