package mcpserver

import (
	"fmt"
	"strings"

	"graphsync/graphmodel"
	"graphsync/retrieve"
)

// ModelURI is the resource describing the graph model.
const ModelURI = "graphsync://graph-model"

// meanings say what the default model's labels and relationships stand for;
// a label of another model is described from its role alone.
var meanings = map[string]string{
	graphmodel.LabelTenant:   "the shop itself; every node and relationship belongs to exactly one tenant, and you only ever see yours",
	graphmodel.LabelCategory: "a product category of the catalogue",
	graphmodel.LabelCustomer: "a customer; only segment and country are in the graph (no name, e-mail, phone or address), and customers are only ever counted, never listed",
	graphmodel.LabelProduct:  "a product of the catalogue: its name and description are what graph_context searches",
	graphmodel.LabelOrder:    "a sales order: status, currency, total and the times it changed status (no address or payment data)",
	graphmodel.RelInCategory: "the product's category (at most one)",
	graphmodel.RelPlaced:     "the customer placed the order",
	graphmodel.RelContains:   "an order line: the order contains the product (quantity and unit price on the relationship)",
}

var roles = map[graphmodel.Role]string{
	graphmodel.RoleTenant:    "tenant",
	graphmodel.RoleAggregate: "written from its own events",
	graphmodel.RoleReference: "written from the events that mention it",
}

// ModelMarkdown describes m for an agent: what each label and relationship
// is, the properties each may hold, what the tools search and which keys
// graph_lookup accepts. It is generated from the model, so it says what the
// graph can hold and nothing else.
func ModelMarkdown(m *graphmodel.Model) string {
	var b strings.Builder
	b.WriteString("# The graph model\n\n")
	b.WriteString("One tenant's commerce data, kept in step with PostgreSQL by graphsync. ")
	b.WriteString("Nodes are cited by key `Label:id` (for example `Product:15`); the tenant is always yours and never part of a key. ")
	b.WriteString("Only the properties listed here can be in the graph: personal data is kept out.\n\n")
	b.WriteString("## Labels\n\n")
	for _, l := range m.Labels {
		meaning := meanings[l.Name]
		if meaning == "" {
			meaning = roles[l.Role]
		}
		fmt.Fprintf(&b, "### %s\n\n%s.\n\n", l.Name, upperFirst(meaning))
		if len(l.Properties) == 0 {
			b.WriteString("Properties: none beyond its id.\n\n")
			continue
		}
		b.WriteString("| property | type | from |\n|---|---|---|\n")
		fmt.Fprintf(&b, "| id | int | the row's id |\n")
		for _, p := range l.Properties {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", p.Key, p.Type, p.Source)
		}
		b.WriteString("\n")
	}
	b.WriteString("## Relationships\n\n")
	for _, r := range m.Relationships {
		fmt.Fprintf(&b, "- `(:%s)-[:%s]->(:%s)`", r.From, r.Type, r.To)
		if meaning := meanings[r.Type]; meaning != "" {
			fmt.Fprintf(&b, ": %s", meaning)
		}
		var props []string
		for _, p := range append(append([]graphmodel.Property{}, r.Key...), r.Properties...) {
			props = append(props, fmt.Sprintf("%s (%s)", p.Key, p.Type))
		}
		if len(props) > 0 {
			fmt.Fprintf(&b, "; properties %s", strings.Join(props, ", "))
		}
		b.WriteString(".\n")
	}
	b.WriteString("\n## What the tools do with it\n\n")
	for _, f := range m.Fulltext {
		fmt.Fprintf(&b, "- `graph_context` searches the fulltext index `%s` over %s %s (analyzer %q), then follows the relationships around each match: %s.\n",
			f.Name, f.Label, strings.Join(f.Properties, " and "), f.Analyzer,
			"category and orders (counted by status, with units) at 1 hop; also products bought together and buyers' segments and countries (counted) at 2 hops")
	}
	fmt.Fprintf(&b, "- `graph_lookup` takes a key whose label is one of %s, and returns the node's properties and its neighbourhood, aggregated.\n",
		strings.Join(retrieve.LookupLabels(m), ", "))
	b.WriteString("- `graph_status` says how far the graph is behind PostgreSQL.\n")
	b.WriteString("- No tool runs a query you write: questions are searched as words, keys are looked up as keys.\n")
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
