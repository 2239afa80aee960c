package projector

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"graphsync/cypher"
	"graphsync/graphmodel"
)

// Dump is one tenant's graph, sorted: what DumpGraph read.
type Dump struct {
	TenantID int64
	// Nodes of the model's labels, sorted by label then id.
	Nodes []DumpNode
	// Tombstones of deleted aggregates, sorted by label then id.
	Tombstones []DumpNode
	// Relationships of the model's types, sorted by their String().
	Relationships []DumpRel
}

// DumpNode is one node. Props holds its properties except tenant_id, id and
// the sync guard, which is in Sync.
type DumpNode struct {
	Label string
	ID    int64
	Props map[string]any
	Sync  graphmodel.Guard
}

// DumpRel is one relationship. FromTenant and ToTenant are its endpoints'
// tenants; Props holds its properties except tenant_id, which is TenantID.
type DumpRel struct {
	Type               string
	FromLabel, ToLabel string
	FromID, ToID       int64
	TenantID           int64
	FromTenant         int64
	ToTenant           int64
	Props              map[string]any
}

// DumpGraph reads every node and relationship of tenantID that the default
// model allows, for comparing graphs (tests, rebuild checks).
func DumpGraph(ctx context.Context, driver neo4j.DriverWithContext, tenantID int64) (Dump, error) {
	return DumpModelGraph(ctx, driver, graphmodel.Default, "", tenantID)
}

// DumpModelGraph is DumpGraph for any model and database.
func DumpModelGraph(ctx context.Context, driver neo4j.DriverWithContext, model graphmodel.Model, database string, tenantID int64) (Dump, error) {
	dump := Dump{TenantID: tenantID}
	tombstones := map[string]bool{}
	for _, l := range model.Labels {
		if l.Tombstone != "" {
			tombstones[l.Tombstone] = true
		}
	}
	session := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeRead, DatabaseName: database})
	defer closeSession(ctx, session)
	_, err := session.ExecuteRead(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		dump.Nodes, dump.Tombstones, dump.Relationships = nil, nil, nil
		params := map[string]any{"tenant_id": tenantID}
		for _, label := range cypher.Labels(model) {
			records, err := collect(ctx, tx, cypher.DumpNodesQuery(label), params)
			if err != nil {
				return nil, err
			}
			for _, record := range records {
				props, _, err := neo4j.GetRecordValue[map[string]any](record, "props")
				if err != nil {
					return nil, err
				}
				node := DumpNode{Label: label, Props: props}
				node.ID, _ = props[graphmodel.KeyID].(int64)
				node.Sync.Version, _ = props[graphmodel.PropVersion].(int64)
				node.Sync.OutboxID, _ = props[graphmodel.PropOutboxID].(int64)
				// The tenant key is derived from tenant_id: shown only when
				// it is not the one the node's tenant implies (or missing),
				// so that a dump compared with another shows it only then.
				tenantID, _ := props[graphmodel.KeyTenantID].(int64)
				if model.TenantKeyed(label) {
					if props[graphmodel.KeyTenantKey] == graphmodel.TenantKey(tenantID) {
						delete(props, graphmodel.KeyTenantKey)
					} else if props[graphmodel.KeyTenantKey] == nil {
						props[graphmodel.KeyTenantKey] = "(missing)"
					}
				}
				for _, key := range []string{graphmodel.KeyTenantID, graphmodel.KeyID, graphmodel.PropVersion, graphmodel.PropOutboxID} {
					delete(props, key)
				}
				if tombstones[label] {
					dump.Tombstones = append(dump.Tombstones, node)
				} else {
					dump.Nodes = append(dump.Nodes, node)
				}
			}
		}
		for _, r := range model.Relationships {
			records, err := collect(ctx, tx, cypher.DumpRelsQuery(r), params)
			if err != nil {
				return nil, err
			}
			for _, record := range records {
				rel := DumpRel{Type: r.Type, FromLabel: r.From, ToLabel: r.To}
				values := record.AsMap()
				rel.FromTenant, _ = values["from_tenant"].(int64)
				rel.FromID, _ = values["from_id"].(int64)
				rel.ToTenant, _ = values["to_tenant"].(int64)
				rel.ToID, _ = values["to_id"].(int64)
				rel.Props, _ = values["props"].(map[string]any)
				rel.TenantID, _ = rel.Props[graphmodel.KeyTenantID].(int64)
				delete(rel.Props, graphmodel.KeyTenantID)
				dump.Relationships = append(dump.Relationships, rel)
			}
		}
		return nil, nil
	})
	if err != nil {
		return Dump{}, fmt.Errorf("dump graph of tenant %d: %w", tenantID, err)
	}
	sortDump(&dump)
	return dump, nil
}

// sortDump puts nodes in (label, id) order and relationships in text order.
func sortDump(d *Dump) {
	byLabelID := func(a, b DumpNode) int {
		if c := strings.Compare(a.Label, b.Label); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	}
	slices.SortFunc(d.Nodes, byLabelID)
	slices.SortFunc(d.Tombstones, byLabelID)
	slices.SortFunc(d.Relationships, func(a, b DumpRel) int { return strings.Compare(a.String(), b.String()) })
}

// String is the canonical text of the tenant's graph content: nodes and
// relationships with their business properties, sorted, one per line. Sync
// guards and tombstones are left out, so a graph rebuilt from other events
// with the same outcome prints the same.
func (d Dump) String() string {
	var sb strings.Builder
	for _, n := range d.Nodes {
		sb.WriteString(n.String())
		sb.WriteByte('\n')
	}
	for _, r := range d.Relationships {
		sb.WriteString(d.relString(r))
		sb.WriteByte('\n')
	}
	return sb.String()
}

// String renders the node as `(:Label id {key: value, ...})`.
func (n DumpNode) String() string {
	return fmt.Sprintf("(:%s %d %s)", n.Label, n.ID, formatProps(n.Props))
}

// String renders the relationship with every endpoint's tenant.
func (r DumpRel) String() string {
	return fmt.Sprintf("(:%s %d @%d)-[:%s @%d %s]->(:%s %d @%d)", r.FromLabel, r.FromID, r.FromTenant,
		r.Type, r.TenantID, formatProps(r.Props), r.ToLabel, r.ToID, r.ToTenant)
}

// relString renders r relative to the dumped tenant: tenants are shown only
// where they differ from it, which a correct graph never shows.
func (d Dump) relString(r DumpRel) string {
	at := func(tenantID int64) string {
		if tenantID == d.TenantID {
			return ""
		}
		return fmt.Sprintf(" @tenant %d", tenantID)
	}
	return fmt.Sprintf("(:%s %d%s)-[:%s%s %s]->(:%s %d%s)", r.FromLabel, r.FromID, at(r.FromTenant),
		r.Type, at(r.TenantID), formatProps(r.Props), r.ToLabel, r.ToID, at(r.ToTenant))
}

func formatProps(props map[string]any) string {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + formatValue(props[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case time.Time:
		return `datetime("` + v.UTC().Format(time.RFC3339Nano) + `")`
	case neo4j.LocalDateTime:
		return "localdatetime(" + v.Time().Format(time.RFC3339Nano) + ")"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

// collect runs a read statement and returns all its records.
func collect(ctx context.Context, tx neo4j.ManagedTransaction, query string, params map[string]any) ([]*neo4j.Record, error) {
	result, err := tx.Run(ctx, query, params)
	if err != nil {
		return nil, err
	}
	return result.Collect(ctx)
}
