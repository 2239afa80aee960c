package redact

import (
	"strings"
	"testing"
)

// Every password form a driver, a flag or an error may carry is hidden, and
// nothing else in the text changes.
func TestText(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"userinfo", "postgres://app:s3cret@db:5432/x?sslmode=disable", "postgres://app:xxxxx@db:5432/x?sslmode=disable"},
		{"unescaped @ in the password", "postgres://app:Pa@ssw0rd@127.0.0.1:1/x?sslmode=bogus", "postgres://app:xxxxx@127.0.0.1:1/x?sslmode=bogus"},
		{"space in the password", "postgres://app:Pa ss@host/x", "postgres://app:xxxxx@host/x"},
		{"slash in the password (base64)", "postgres://app:ab/cd+ef==@db:5432/x", "postgres://app:xxxxx@db:5432/x"},
		{"? and # in the password", "postgres://app:a?b#c@host/x", "postgres://app:xxxxx@host/x"},
		{"pgx's own half-redacted echo", "cannot parse `postgres://app:xxxxx@ssw0rd@127.0.0.1:1/x?sslmode=bogus`: failed to configure TLS",
			"cannot parse `postgres://app:xxxxx@127.0.0.1:1/x?sslmode=bogus`: failed to configure TLS"},
		{"no user name", "postgres://:s3cret@db/x", "postgres://:xxxxx@db/x"},
		{"bad port", "postgres://graphsync:s3cret@127.0.0.1:notaport/graphsync", "postgres://graphsync:xxxxx@127.0.0.1:notaport/graphsync"},
		{"bad escape", "postgres://graphsync:s3cret%zz@127.0.0.1/graphsync", "postgres://graphsync:xxxxx@127.0.0.1/graphsync"},
		{"multi-host", "postgres://app:s3cret@h1:5432,h2:5433/x?target_session_attrs=read-write", "postgres://app:xxxxx@h1:5432,h2:5433/x?target_session_attrs=read-write"},
		{"IPv6 host", "postgres://app:s3cret@[::1]:5432/x", "postgres://app:xxxxx@[::1]:5432/x"},
		{"bolt", "bolt://neo4j:s3cret@localhost:7687", "bolt://neo4j:xxxxx@localhost:7687"},
		{"neo4j+s", "neo4j+s://neo4j:s3cret@graph.example.com", "neo4j+s://neo4j:xxxxx@graph.example.com"},
		{"two URLs", "dial postgres://a:s3cret@db/x, then bolt://n:hunter2@g:7687 failed",
			"dial postgres://a:xxxxx@db/x, then bolt://n:xxxxx@g:7687 failed"},
		{"query password", "postgres://db/x?password=s3cret&sslmode=disable", "postgres://db/x?password=xxxxx&sslmode=disable"},
		{"query sslpassword", "postgres://app@db/x?sslmode=verify-full&sslpassword=s3cret", "postgres://app@db/x?sslmode=verify-full&sslpassword=xxxxx"},
		{"key/value", "host=db user=app password=s3cret dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"key/value, spaces around =", "host=db password = s3cret dbname=x", "host=db password = xxxxx dbname=x"},
		{"key/value, upper case", "PASSWORD=s3cret", "PASSWORD=xxxxx"},
		{"key/value, escaped space", `host=db password=top\ secret user=app`, "host=db password=xxxxx user=app"},
		{"key/value, quoted", "host=db password='a b secret' user=app", "host=db password=xxxxx user=app"},
		{"key/value, quoted with an escaped quote", `host=db password='it\'s secret' user=app`, "host=db password=xxxxx user=app"},
		{"key/value, unterminated quote", "host=db password='a secret", "host=db password=xxxxx"},
		{"colon", "auth failed: password: hunter2 user=neo4j", "auth failed: password: xxxxx user=neo4j"},
		{"JSON", `{"user":"app","password":"s3cret"}`, `{"user":"app","password":xxxxx}`},
		{"unescaped @ in the user name", "postgres://graphsync@myserver:S3cret@h.example.com:5432/db", "postgres://graphsync@myserver:xxxxx@h.example.com:5432/db"},
		{"unescaped @ in the user name, a space in the password", "postgres://app@server:my s3cret@127.0.0.1:1/x", "postgres://app@server:xxxxx@127.0.0.1:1/x"},
		{"unescaped @ in the user name, a password of digits", "postgres://app@server:123456@db.example.com:5432/x", "postgres://app@server:xxxxx@db.example.com:5432/x"},
		// Left as they are.
		{"user@server without a password, then an @ in the text", "postgres://app@db:5432/x: lookup a b@host", "postgres://app@db:5432/x: lookup a b@host"},
		{"URL without a password", "postgres://app@db/x", "postgres://app@db/x"},
		{"URL without userinfo", "bolt://localhost:7687 refused: connection reset", "bolt://localhost:7687 refused: connection reset"},
		{"the word password", `FATAL: password authentication failed for user "app"`, `FATAL: password authentication failed for user "app"`},
		{"plain text", "no such host", "no such host"},
	} {
		got := Text(c.in)
		if got != c.want {
			t.Errorf("%s: Text(%q)\n got %q\nwant %q", c.name, c.in, got, c.want)
		}
		for _, secret := range []string{"s3cret", "hunter2", "ssw0rd", "Pa ss", "secret", "a?b"} {
			if strings.Contains(got, secret) {
				t.Errorf("%s: %q left in %q", c.name, secret, got)
			}
		}
		if URL(c.in) != got {
			t.Errorf("%s: URL and Text differ: %q, %q", c.name, URL(c.in), got)
		}
	}
}

// A password a driver echoes outside any recognised form goes too, when
// the connection string that holds it is given.
func TestTextWith(t *testing.T) {
	conn := "postgres://app:Pa@ssw0rd@db/x"
	got := TextWith(`server said: role "app" rejected Pa@ssw0rd`, conn)
	if strings.Contains(got, "ssw0rd") || got != `server said: role "app" rejected xxxxx` {
		t.Errorf("TextWith = %q", got)
	}
	if got := TextWith("no secret here", "postgres://app@db/x", "host=db password="); got != "no secret here" {
		t.Errorf("TextWith without a password changed the text: %q", got)
	}
	for _, c := range []struct{ name, conn, echo, want string }{
		// pgx hides a key/value password up to its first escaped space.
		{"escaped spaces", `host=db user=app password=correct\ horse\ battery sslmode=requre`,
			"cannot parse `host=db user=app password=xxxxx horse\\ battery sslmode=requre`: failed to configure TLS",
			"cannot parse `host=db user=app password=xxxxx xxxxx sslmode=requre`: failed to configure TLS"},
		// pgx takes the userinfo up to the first '@': the rest of the
		// password becomes part of the host it looks up.
		{"the password's end in a host name", "postgres://app:Tr0ub4dor@3xY9kQ@db.internal:5432/db",
			"dial tcp: lookup 3xY9kQ@db.internal: no such host", "dial tcp: lookup xxxxx@db.internal: no such host"},
		// A passphrase of short words: pgx echoes all but the first.
		{"short words after escaped spaces", `host=db password=red\ fox\ ran\ far sslmode=requre`,
			"cannot parse `host=db password=xxxxx fox\\ ran\\ far sslmode=requre`: failed to configure TLS",
			"cannot parse `host=db password=xxxxx xxxxx sslmode=requre`: failed to configure TLS"},
		// A quoted password with an escaped quote: pgx echoes what
		// follows its first space.
		{"a quoted password's tail", `host=db password='ab\'cd ef gh' sslmode=requre`,
			"cannot parse `host=db password=xxxxx ef gh' sslmode=requre`: failed to configure TLS",
			"cannot parse `host=db password=xxxxx xxxxx sslmode=requre`: failed to configure TLS"},
		// An '@' and a '/' in the password: pgx reads a database name
		// from what follows the '/'.
		{"the password's end in a database name", "postgres://app:p@ss/w0rd@127.0.0.1:1/x",
			"failed to connect to `user=app database=w0rd@127.0.0.1:1/x`", "failed to connect to `user=app database=xxxxx@127.0.0.1:1/x`"},
		// Too short to hide outside a recognised form: hiding it would
		// hide every 1 of the address.
		{"a one-character password", "postgres://app:1@127.0.0.1:1/db",
			"dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
	} {
		if got := TextWith(c.echo, c.conn); got != c.want {
			t.Errorf("%s: TextWith(%q)\n got %q\nwant %q", c.name, c.echo, got, c.want)
		}
	}
}

// Whatever a URL's password holds (short of the '/' that starts a path and
// the line breaks that end a text), it is hidden whole.
func FuzzURLPassword(f *testing.F) {
	for _, seed := range []string{"s3cret", "ab/cd+ef==", "Pa@ssw0rd", "Pa ss", "a?b#c@d", "x@db:5432", `top\ secret`, "'", "password='a"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, password string) {
		if password == "" || strings.ContainsAny(password, "\n\r\t`") || strings.Contains(password, "://") {
			t.Skip()
		}
		const want = "postgres://app:xxxxx@db:5432/x"
		if got := URL("postgres://app:" + password + "@db:5432/x"); got != want {
			t.Errorf("password %q: got %q, want %q", password, got, want)
		}
		_ = Text(password) // any text: no panic
	})
}
