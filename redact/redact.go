// Package redact owns the one rule that hides passwords in text before it
// reaches a log line, an error message, a report or a database column: the
// password of a URL's userinfo (postgres://, bolt://, neo4j://, any scheme)
// and the value of a password key (password=, sslpassword=, ?password=,
// password: ...), quoted, escaped or plain.
//
// It errs on the side of hiding: where a malformed connection string makes
// the end of a password ambiguous, more than the password may go. It must
// never parse a connection string to use it, and never log or keep what it
// hides.
package redact

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Mask is what a password is replaced with.
const Mask = "xxxxx"

// Text hides every password in s: in URL userinfo (scheme://user:pass@host)
// and after a password key (password=value, ?password=value,
// password: value), with the rest of the text left as it was.
func Text(s string) string {
	return replace(s, secrets(s))
}

// ErrorText hides credentials in a driver's error text and bounds it, for
// logs and reports.
func ErrorText(s string) string { return Clip(Text(s), 2048) }

// Clip bounds a text for logs and error columns: producers may put anything
// in a trace id or an event type, and a megabyte of it in every log line
// helps nobody.
func Clip(s string, maxBytes int) string {
	if len(s) <= maxBytes {
		return s
	}
	cut := maxBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(truncated)"
}

// URL hides the password of one connection string: a URL (any scheme,
// several hosts, a password that holds an unescaped @ or space) or a
// key/value string (host=db password='a b').
func URL(raw string) string { return Text(raw) }

// TextWith is Text, and also hides every literal occurrence, anywhere in s,
// of a password one of connStrings holds, and of each of its pieces between
// spaces, backslashes, quotes and '@': a driver may echo a password outside
// any form Text recognises, or only part of it (pgx hides a key/value
// password up to its first escaped space; a password with an unescaped '@'
// becomes part of the host name it fails to look up). Pieces shorter than
// minPiece stay: hiding every "1" of a text would make its addresses
// unreadable and hide nothing worth hiding.
func TextWith(s string, connStrings ...string) string {
	s = Text(s)
	var literals []string
	for _, conn := range connStrings {
		for _, sp := range secrets(conn) {
			pw := conn[sp.from:sp.to]
			literals = append(literals, pw)
			literals = append(literals, strings.FieldsFunc(pw, func(r rune) bool {
				return r == '\\' || r == '\'' || r == '"' || r == '@' || r == '/' || r < 0x80 && isSpace(byte(r))
			})...)
			// What follows each space, as written (with and without a
			// closing quote): pgx hides a key/value password up to its
			// first space only, escaped or inside quotes, and the words
			// after it may each be too short to hide on their own.
			for k := range len(pw) {
				if pw[k] == ' ' {
					literals = append(literals, pw[k+1:], strings.TrimRight(pw[k+1:], `'"`))
				}
			}
		}
	}
	// The longest first, so that a piece does not cut a longer literal that
	// holds it.
	slices.SortFunc(literals, func(a, b string) int { return len(b) - len(a) })
	for _, literal := range literals {
		if len(literal) >= minPiece {
			s = strings.ReplaceAll(s, literal, Mask)
		}
	}
	return s
}

// minPiece is the shortest literal TextWith hides outside a recognised form.
const minPiece = 4

// span is the byte range of one password in a text.
type span struct{ from, to int }

func replace(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	at := 0
	for _, sp := range spans {
		b.WriteString(s[at:sp.from])
		b.WriteString(Mask)
		at = sp.to
	}
	b.WriteString(s[at:])
	return b.String()
}

// secrets finds the passwords of s, in order and not overlapping.
func secrets(s string) []span {
	var spans []span
	for i := 0; i < len(s); {
		var sp span
		var ok bool
		switch {
		case strings.HasPrefix(s[i:], "://"):
			sp, ok = userinfoPassword(s, i)
		case hasFoldPrefix(s[i:], "password"):
			sp, ok = keyPassword(s, i)
		}
		if !ok {
			i++
			continue
		}
		if sp.to > sp.from {
			spans = append(spans, sp)
		}
		i = max(sp.to, i+1)
	}
	return spans
}

// userinfoPassword reads the password of scheme://user:password@host, where
// s[at:] starts with "://". A host holds no '@', so the userinfo ends at the
// last '@' that a host-like text follows, before the line or the next URL
// ends: a password may hold an unescaped '@', '/', a space, '?' or '#'
// (base64 secrets hold '/'; drivers echo such URLs when they refuse them).
func userinfoPassword(s string, at int) (span, bool) {
	if !isScheme(s[:at]) {
		return span{}, false
	}
	i := at + len("://")
	// The user name may hold an unescaped '@' too (user@server, as some
	// hosted PostgreSQL services name their logins).
	userAt := false
	for i < len(s) && !strings.ContainsRune(":/", rune(s[i])) && !isSpace(s[i]) {
		userAt = userAt || s[i] == '@'
		i++
	}
	if i >= len(s) || s[i] != ':' {
		return span{}, false // no userinfo, or a user without a password
	}
	from := i + 1
	end := len(s)
	if stop := strings.IndexAny(s[from:], "\n\r\t`"); stop >= 0 {
		end = from + stop
	}
	if next := strings.Index(s[from:end], "://"); next >= 0 {
		end = from + next // the next URL's own userinfo is its own
	}
	for j := end - 1; j >= from; j-- {
		if s[j] == '@' && hostFollows(s[j+1:]) {
			if userAt && portFollows(s[from:j]) {
				// user@host:port followed by text with an '@' in it: the
				// colon was the port's, not a password's.
				return span{}, false
			}
			return span{from, j}, true
		}
	}
	return span{}, false
}

// portFollows reports whether s starts with a port: digits, then the end, a
// path, a query or a space.
func portFollows(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	// Digits that run into the '@' are the password ("app@server:123456@").
	return i > 0 && i < len(s) && (strings.IndexByte("/?,", s[i]) >= 0 || isSpace(s[i]))
}

// isScheme reports whether s ends with a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func isScheme(s string) bool {
	start := len(s)
	for start > 0 && isSchemeByte(s[start-1]) {
		start--
	}
	for start < len(s) && !isLetter(s[start]) {
		start++ // a scheme starts with a letter
	}
	return start < len(s)
}

func isSchemeByte(c byte) bool {
	return isLetter(c) || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// hostFollows reports whether s starts with a host list (names, addresses,
// ports, [IPv6], commas between hosts) ended by the end of the authority or
// of the text.
func hostFollows(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isLetter(c) || c >= '0' && c <= '9' || strings.IndexByte(".-_:[],%", c) >= 0:
		case strings.IndexByte("/?#`'\");>", c) >= 0 || isSpace(c):
			return true
		default:
			return false // an '@' or another character no host holds
		}
	}
	return true
}

// keyPassword reads the value of a password key at s[at:], which starts
// with "password" (any case; "sslpassword" and other keys ending so count
// too). In a URL query (?password= or &password=) the value ends at '&',
// '#' or a space; elsewhere it is a key/value value as libpq reads it:
// quoted ('a b', with \' inside) or up to an unescaped space (top\ secret).
func keyPassword(s string, at int) (span, bool) {
	keyStart := at
	for keyStart > 0 && isLetter(s[keyStart-1]) {
		keyStart--
	}
	inQuery := keyStart > 0 && (s[keyStart-1] == '?' || s[keyStart-1] == '&')
	i := at + len("password")
	if i < len(s) && (s[i] == '"' || s[i] == '\'') && keyStart > 0 && s[keyStart-1] == s[i] {
		i++ // a quoted key: "password": "..."
	}
	for i < len(s) && s[i] == ' ' {
		i++
	}
	if i >= len(s) || !(s[i] == '=' || s[i] == ':' && !inQuery) {
		return span{}, false // "password authentication failed", not a value
	}
	i++
	if inQuery {
		from := i
		for i < len(s) && s[i] != '&' && s[i] != '#' && !isSpace(s[i]) {
			i++
		}
		return span{from, i}, true
	}
	for i < len(s) && isSpace(s[i]) && s[i] != '\n' {
		i++
	}
	from := i
	if i < len(s) && (s[i] == '\'' || s[i] == '"') {
		quote := s[i]
		for i++; i < len(s); i++ {
			if s[i] == '\\' {
				i++
				continue
			}
			if s[i] == quote {
				return span{from, i + 1}, true
			}
		}
		return span{from, len(s)}, true // no closing quote: all the rest may be the password
	}
	for ; i < len(s) && !isSpace(s[i]); i++ {
		if s[i] == '\\' {
			i++
		}
	}
	return span{from, min(i, len(s))}, true
}

func hasFoldPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
