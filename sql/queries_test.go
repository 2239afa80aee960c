package sql

import (
	"testing"
	"testing/fstest"
)

func TestLoadQueries(t *testing.T) {
	fsys := fstest.MapFS{"queries/a.sql": {Data: []byte("-- header\n-- name: One\nSELECT 1;\n\n-- name: Two\n-- comment\nSELECT $1;\n")}}
	got, err := loadQueries(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if got["One"] != "SELECT 1;" || got["Two"] != "-- comment\nSELECT $1;" || len(got) != 2 {
		t.Fatalf("loaded %q", got)
	}
	dup := fstest.MapFS{"queries/a.sql": {Data: []byte("-- name: X\nSELECT 1;\n-- name: X\nSELECT 2;\n")}}
	if _, err := loadQueries(dup); err == nil {
		t.Fatal("a query defined twice was accepted")
	}
	if len(queries) == 0 {
		t.Fatal("no embedded queries")
	}
}

func TestMigrationsAreNumberedInOrder(t *testing.T) {
	migrations, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range migrations {
		if m.Version != i+1 {
			t.Errorf("migration %s has version %d, want %d", m.Name, m.Version, i+1)
		}
	}
}
