// Package graphmodel is the graph schema as data: the labels and relationship
// types graphsync may write, each node's key, which properties each may hold
// (an allowlist: nothing outside it ever reaches the graph), the fulltext
// index GraphRAG retrieval uses, and the mutation values the projector hands
// to the cypher package.
//
// It must not talk to Neo4j or know about event payloads: it says what the
// graph may contain, nothing else.
//
// Tenancy: every node and every relationship carries tenant_id, and every key
// is (tenant_id, id). There is one (:Tenant) node per tenant, but nodes are not
// linked to it: a BELONGS_TO edge from every node would make the tenant node a
// super node whose lock every write in that tenant takes (Neo4j locks both ends
// of a new relationship), serialising a tenant's whole write load, while
// retrieval filters on the indexed tenant_id property anyway.
package graphmodel

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Property keys graphsync sets itself on every node; no allowlisted property
// may use them.
const (
	// KeyTenantID is the first half of every node key and on every relationship.
	KeyTenantID = "tenant_id"
	// KeyID is the second half of every node key: the business row's id.
	KeyID = "id"
	// PropVersion is the aggregate version last applied to a node (0 on nodes
	// that are not aggregates: they follow the outbox id alone).
	PropVersion = "sync_version"
	// PropOutboxID is the outbox id of the event last applied to a node.
	PropOutboxID = "sync_outbox_id"
	// KeyTenantKey is the tenant as a fulltext term (TenantKey), on every
	// node of a label a fulltext index covers, and indexed by that index:
	// a seed query requires it, so Lucene intersects the question's hits
	// with the tenant's postings inside the index and a tenant's query
	// costs what its own matches cost, not every tenant's (ADR 0024). It is
	// derived from tenant_id, never from a payload.
	KeyTenantKey = "tenant_key"
)

// TenantKey is the value of KeyTenantKey for a tenant: "t" and its id in
// decimal, one token for every Lucene analyzer (letters then digits, no
// separator, unchanged by lower-casing and stemming).
func TenantKey(tenantID int64) string { return "t" + strconv.FormatInt(tenantID, 10) }

// TenantKeyed reports whether nodes of label carry KeyTenantKey: a fulltext
// index of the model covers the label.
func (m *Model) TenantKeyed(label string) bool {
	for _, f := range m.Fulltext {
		if f.Label == label {
			return true
		}
	}
	return false
}

// IndexedProperties lists what the index is built on: the declared
// properties, then KeyTenantKey.
func (f Fulltext) IndexedProperties() []string {
	return append(slices.Clone(f.Properties), KeyTenantKey)
}

// IsReserved reports whether key is a property graphsync sets itself on
// nodes (the key, the sync guard, the tenant key): never allowlisted, never
// outside the allowlist.
func IsReserved(key string) bool { return slices.Contains(reservedKeys, key) }

// Type is a property's value type.
type Type int

// Property value types; a nil value (SQL NULL) is allowed for every type and
// removes the property.
const (
	String   Type = iota + 1 // Go string
	Int                      // Go int64
	DateTime                 // Go time.Time
)

func (t Type) String() string {
	switch t {
	case String:
		return "string"
	case Int:
		return "int"
	case DateTime:
		return "datetime"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Property is one allowlisted property.
type Property struct {
	Key  string
	Type Type
	// Source names the business column (and event field) it comes from.
	Source string
	// FreeText marks a string people type (a name, a description), as
	// opposed to a code or identifier (a SKU, a currency): e-mail addresses
	// and phone numbers in it are masked before it is written
	// (Model.WithoutPersonalData). A code is written as it is; personal
	// data in it is left for drift to report.
	FreeText bool
}

// Role says how a label's nodes are written.
type Role int

const (
	// RoleTenant: one node per tenant, id = tenant_id, no properties.
	RoleTenant Role = iota + 1
	// RoleAggregate: the node of a Product or Order aggregate, written only by
	// that aggregate's events and guarded by (aggregate version, outbox id).
	RoleAggregate
	// RoleReference: a node other aggregates' events mention (a category, a
	// customer); its properties follow the highest outbox id seen.
	RoleReference
)

// Label is one node label.
type Label struct {
	Name string
	Role Role
	// AggregateType is the outbox aggregate_type owning RoleAggregate nodes.
	AggregateType string
	// Properties is the allowlist beyond the key and the sync properties.
	Properties []Property
	// Personal lists the source row's personal-data columns: documented here so
	// that tests and reviewers can check none is ever allowlisted.
	Personal []string
	// Tombstone, when set, is the label of the node left behind when an
	// aggregate is deleted, so a late event cannot bring it back.
	Tombstone string
}

// Property returns the allowlisted property named key.
func (l Label) Property(key string) (Property, bool) {
	for _, p := range l.Properties {
		if p.Key == key {
			return p, true
		}
	}
	return Property{}, false
}

// Relationship is one relationship type between two labels of one tenant.
type Relationship struct {
	Type     string
	From, To string
	// Single: the From node has at most one such relationship, and it follows
	// the From node's guarded state (replaced when the node is updated).
	// Otherwise relationships are facts: merged, never removed by an update.
	Single bool
	// Key properties tell apart several relationships between the same two
	// nodes (two order lines of the same product); part of the MERGE pattern.
	Key []Property
	// Properties is the allowlist beyond the key and tenant_id.
	Properties []Property
}

// Fulltext is a fulltext index over string properties of one label, the
// entry point of GraphRAG retrieval (package retrieve seeds its context from
// every fulltext index of the model).
type Fulltext struct {
	Name       string
	Label      string
	Properties []string
	// Analyzer is the Lucene analyzer Neo4j tokenises both the indexed text
	// and the query with (CALL db.index.fulltext.listAvailableAnalyzers()).
	// Default model: "english" (lower case, English stop words, Porter
	// stemming), so "kettles" finds "Kettle". Empty means Neo4j's default,
	// standard-no-stop-words. Changing it makes `graphsync migrate` drop and
	// recreate the index.
	Analyzer string
}

// Model is the whole graph schema.
type Model struct {
	// Labels in write order: a label's nodes are merged before those of later
	// labels, and all nodes before any relationship.
	Labels        []Label
	Relationships []Relationship
	Fulltext      []Fulltext
	// Embedding, when set, is the one embedded text of the graph (see
	// Embedding); nil embeds nothing.
	Embedding *Embedding
}

// Label returns the label named name.
func (m *Model) Label(name string) (Label, bool) {
	for _, l := range m.Labels {
		if l.Name == name {
			return l, true
		}
	}
	return Label{}, false
}

// Relationship returns the relationship type named typ.
func (m *Model) Relationship(typ string) (Relationship, bool) {
	for _, r := range m.Relationships {
		if r.Type == typ {
			return r, true
		}
	}
	return Relationship{}, false
}

// Label names of the default model.
const (
	LabelTenant          = "Tenant"
	LabelCategory        = "Category"
	LabelCustomer        = "Customer"
	LabelProduct         = "Product"
	LabelOrder           = "Order"
	LabelDeletedProduct  = "DeletedProduct"
	RelInCategory        = "IN_CATEGORY"
	RelPlaced            = "PLACED"
	RelContains          = "CONTAINS"
	FulltextProductText  = "product_text"
	aggregateTypeProduct = "Product"
	aggregateTypeOrder   = "Order"
)

// Default is graphsync's graph.
var Default = Model{
	Labels: []Label{
		{Name: LabelTenant, Role: RoleTenant},
		{Name: LabelCategory, Role: RoleReference, Properties: []Property{
			{Key: "name", Type: String, Source: "categories.name", FreeText: true},
		}},
		{Name: LabelCustomer, Role: RoleReference,
			Properties: []Property{
				{Key: "segment", Type: String, Source: "customers.segment", FreeText: true},
				{Key: "country_code", Type: String, Source: "customers.country_code"},
			},
			Personal: []string{"email", "full_name", "name", "phone", "address"},
		},
		{Name: LabelProduct, Role: RoleAggregate, AggregateType: aggregateTypeProduct, Tombstone: LabelDeletedProduct,
			Properties: []Property{
				{Key: "sku", Type: String, Source: "products.sku"},
				{Key: "name", Type: String, Source: "products.name", FreeText: true},
				{Key: "description", Type: String, Source: "products.description", FreeText: true},
				{Key: "price_cents", Type: Int, Source: "products.price_cents"},
				{Key: "currency", Type: String, Source: "products.currency"},
				{Key: "status", Type: String, Source: "products.status"},
			}},
		{Name: LabelOrder, Role: RoleAggregate, AggregateType: aggregateTypeOrder,
			Properties: []Property{
				{Key: "status", Type: String, Source: "sales_orders.status"},
				{Key: "currency", Type: String, Source: "sales_orders.currency"},
				{Key: "total_cents", Type: Int, Source: "sales_orders.total_cents"},
				{Key: "placed_at", Type: DateTime, Source: "sales_orders.placed_at"},
				{Key: "confirmed_at", Type: DateTime, Source: "sales_orders.confirmed_at"},
				{Key: "shipped_at", Type: DateTime, Source: "sales_orders.shipped_at"},
				{Key: "cancelled_at", Type: DateTime, Source: "sales_orders.cancelled_at"},
			},
			Personal: []string{"shipping_address", "payment", "card_number", "iban"},
		},
	},
	Relationships: []Relationship{
		{Type: RelInCategory, From: LabelProduct, To: LabelCategory, Single: true},
		{Type: RelPlaced, From: LabelCustomer, To: LabelOrder},
		{Type: RelContains, From: LabelOrder, To: LabelProduct,
			Key: []Property{{Key: "line_no", Type: Int, Source: "order_lines.line_no"}},
			Properties: []Property{
				{Key: "quantity", Type: Int, Source: "order_lines.quantity"},
				{Key: "unit_price_cents", Type: Int, Source: "order_lines.unit_price_cents"},
			}},
	},
	// Product names and descriptions are the text a shopper's or an analyst's
	// question is about; categories are reached through IN_CATEGORY. No
	// fulltext index covers a label with personal data (Customer).
	Fulltext: []Fulltext{
		{Name: FulltextProductText, Label: LabelProduct, Properties: []string{"name", "description"}, Analyzer: "english"},
	},
	Embedding: &DefaultEmbedding,
}

// identifier is what a label, type, key or index name may look like, so that
// each can be written into Cypher text without quoting.
var identifier = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,62}$`)

// analyzerName is what a Lucene analyzer name may look like ("english",
// "standard-no-stop-words"), so it can be written into index DDL as a literal.
var analyzerName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

var reservedKeys = []string{KeyTenantID, KeyID, PropVersion, PropOutboxID, KeyTenantKey}

// Validate checks the model is self-consistent and every name is a plain
// identifier. The cypher package refuses a model that fails it.
func (m *Model) Validate() error {
	names := map[string]bool{}
	for _, l := range m.Labels {
		if !identifier.MatchString(l.Name) {
			return fmt.Errorf("label %q is not a plain identifier", l.Name)
		}
		if names[l.Name] {
			return fmt.Errorf("label %s is defined twice", l.Name)
		}
		names[l.Name] = true
		if l.Role < RoleTenant || l.Role > RoleReference {
			return fmt.Errorf("label %s has no role", l.Name)
		}
		if l.Role == RoleTenant && len(l.Properties) > 0 {
			return fmt.Errorf("tenant label %s cannot have properties", l.Name)
		}
		if l.Role == RoleAggregate && l.AggregateType == "" {
			return fmt.Errorf("aggregate label %s has no aggregate type", l.Name)
		}
		if l.Tombstone != "" {
			if l.Role != RoleAggregate {
				return fmt.Errorf("label %s: only aggregates have tombstones", l.Name)
			}
			if !identifier.MatchString(l.Tombstone) || names[l.Tombstone] {
				return fmt.Errorf("label %s: bad tombstone label %q", l.Name, l.Tombstone)
			}
			names[l.Tombstone] = true
		}
		if err := validateProperties("label "+l.Name, l.Properties); err != nil {
			return err
		}
		for _, personal := range l.Personal {
			if _, allowed := l.Property(personal); allowed {
				return fmt.Errorf("label %s allowlists personal field %s", l.Name, personal)
			}
		}
	}
	tenants := 0
	for _, l := range m.Labels {
		if l.Role == RoleTenant {
			tenants++
		}
	}
	if tenants != 1 {
		return fmt.Errorf("model needs exactly one tenant label, has %d", tenants)
	}
	types := map[string]bool{}
	for _, r := range m.Relationships {
		if !identifier.MatchString(r.Type) || types[r.Type] {
			return fmt.Errorf("relationship type %q is not a plain identifier or is defined twice", r.Type)
		}
		types[r.Type] = true
		from, okFrom := m.Label(r.From)
		to, okTo := m.Label(r.To)
		if !okFrom || !okTo || from.Role == RoleTenant || to.Role == RoleTenant {
			return fmt.Errorf("relationship %s joins unknown or tenant labels %s, %s", r.Type, r.From, r.To)
		}
		if r.Single && (from.Role != RoleAggregate || len(r.Key) > 0) {
			return fmt.Errorf("relationship %s: a single relationship needs an aggregate From and no key", r.Type)
		}
		if err := validateProperties("relationship "+r.Type, slices.Concat(r.Key, r.Properties)); err != nil {
			return err
		}
	}
	for _, f := range m.Fulltext {
		l, ok := m.Label(f.Label)
		if !identifier.MatchString(f.Name) || !ok || len(f.Properties) == 0 {
			return fmt.Errorf("fulltext index %q: bad name or label %q", f.Name, f.Label)
		}
		if f.Analyzer != "" && !analyzerName.MatchString(f.Analyzer) {
			return fmt.Errorf("fulltext index %s: analyzer %q is not a plain analyzer name", f.Name, f.Analyzer)
		}
		if l.Role == RoleTenant || len(l.Personal) > 0 {
			return fmt.Errorf("fulltext index %s: label %s is a tenant label or has personal data", f.Name, f.Label)
		}
		for _, key := range f.Properties {
			if p, ok := l.Property(key); !ok || p.Type != String {
				return fmt.Errorf("fulltext index %s: %s.%s is not an allowlisted string property", f.Name, f.Label, key)
			}
		}
	}
	if m.Embedding != nil {
		if err := m.validateEmbedding(*m.Embedding); err != nil {
			return err
		}
	}
	return nil
}

func validateProperties(owner string, props []Property) error {
	seen := map[string]bool{}
	for _, p := range props {
		if !identifier.MatchString(p.Key) || slices.Contains(reservedKeys, p.Key) || seen[p.Key] {
			return fmt.Errorf("%s: property %q is not a plain identifier, is reserved or repeats", owner, p.Key)
		}
		if p.Type < String || p.Type > DateTime {
			return fmt.Errorf("%s: property %s has no type", owner, p.Key)
		}
		seen[p.Key] = true
	}
	return nil
}

// CheckValue reports whether v may be stored in a property of type t.
func CheckValue(t Type, v any) error {
	if v == nil {
		return nil
	}
	ok := false
	switch t {
	case String:
		_, ok = v.(string)
	case Int:
		_, ok = v.(int64)
	case DateTime:
		_, ok = v.(time.Time)
	}
	if !ok {
		return fmt.Errorf("value of type %T is not a %s", v, t)
	}
	return nil
}
