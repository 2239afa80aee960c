package graphmodel

import (
	"strings"
	"testing"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultKeepsPersonalDataOut(t *testing.T) {
	personal := []string{"email", "full_name", "phone", "address", "shipping_address", "payment", "card_number", "iban"}
	for _, l := range Default.Labels {
		for _, p := range l.Properties {
			for _, word := range personal {
				if strings.Contains(p.Key, word) {
					t.Errorf("label %s allowlists %s, which looks like personal data", l.Name, p.Key)
				}
			}
		}
	}
	customer, _ := Default.Label(LabelCustomer)
	for _, field := range []string{"email", "full_name", "phone", "address"} {
		if !contains(customer.Personal, field) {
			t.Errorf("Customer.Personal does not document %s", field)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	valid := func() Model {
		return Model{
			Labels: []Label{
				{Name: "Tenant", Role: RoleTenant},
				{Name: "Product", Role: RoleAggregate, AggregateType: "Product", Properties: []Property{{Key: "name", Type: String}}},
				{Name: "Category", Role: RoleReference},
			},
			Relationships: []Relationship{{Type: "IN_CATEGORY", From: "Product", To: "Category", Single: true}},
			Fulltext:      []Fulltext{{Name: "product_text", Label: "Product", Properties: []string{"name"}}},
		}
	}
	if m := valid(); m.Validate() != nil {
		t.Fatalf("base model invalid: %v", m.Validate())
	}
	tests := map[string]func(*Model){
		"label not identifier": func(m *Model) { m.Labels[1].Name = "Product:Admin" },
		"duplicate label":      func(m *Model) { m.Labels[2].Name = "Product" },
		"reserved key":         func(m *Model) { m.Labels[1].Properties[0].Key = KeyTenantID },
		"property no type":     func(m *Model) { m.Labels[1].Properties[0].Type = 0 },
		"personal allowlisted": func(m *Model) { m.Labels[1].Personal = []string{"name"} },
		"no tenant label":      func(m *Model) { m.Labels[0].Role = RoleReference },
		"rel unknown label":    func(m *Model) { m.Relationships[0].To = "Nope" },
		"single from ref":      func(m *Model) { m.Relationships[0].From = "Category"; m.Relationships[0].To = "Product" },
		"fulltext non string":  func(m *Model) { m.Fulltext[0].Properties = []string{"sku"} },
		"tombstone clash":      func(m *Model) { m.Labels[1].Tombstone = "Category" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			m := valid()
			mutate(&m)
			if err := m.Validate(); err == nil {
				t.Fatal("Validate accepted the model")
			}
		})
	}
}

func TestGuardNewer(t *testing.T) {
	if !(Guard{Version: 2, OutboxID: 1}).Newer(Guard{Version: 1, OutboxID: 9}) {
		t.Error("higher version must win over higher outbox id")
	}
	if !(Guard{Version: 1, OutboxID: 9}).Newer(Guard{Version: 1, OutboxID: 8}) {
		t.Error("outbox id must break a version tie")
	}
	if (Guard{Version: 1, OutboxID: 9}).Newer(Guard{Version: 1, OutboxID: 9}) {
		t.Error("equal guards: neither is newer")
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
