package sql

import "testing"

// The index a no-transaction migration builds is found as written (quoted,
// qualified by its schema), never in a comment above the statement.
func TestConcurrentIndexName(t *testing.T) {
	for sql, want := range map[string]string{
		"-- CREATE INDEX CONCURRENTLY decoy\nCREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_messages_failing_idx\n  ON outbox_messages (id)": "outbox_messages_failing_idx",
		`create unique index concurrently "Foo Idx" on t (a)`:                                                                                `"Foo Idx"`,
		`CREATE INDEX CONCURRENTLY public.foo_idx ON t (a)`:                                                                                  "public.foo_idx",
		`CREATE INDEX CONCURRENTLY IF NOT EXISTS "S"."Foo" ON t (a)`:                                                                         `"S"."Foo"`,
	} {
		m := concurrentIndex.FindStringSubmatch(withoutComments(sql))
		if m == nil || m[1] != want {
			t.Errorf("index of %q: %v, want %q", sql, m, want)
		}
	}
}
