package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// Record is a stored outbox row as far as decoding is concerned.
type Record struct {
	// OutboxID is outbox_messages.id, used only to name the row in errors (0: unknown).
	OutboxID      int64
	AggregateType string
	AggregateID   int64
	EventType     string
	EventVersion  int16
	Payload       []byte
}

// eventError is a decode or validation failure. Its text names the event and
// the problem; errors.Is matches ErrUnknownEvent or ErrInvalidPayload.
type eventError struct {
	kind error
	msg  string
}

func (e *eventError) Error() string { return e.msg }
func (e *eventError) Unwrap() error { return e.kind }

// Limits bound one event, so that no event can hold the projector's memory
// or a Neo4j transaction without bound. They are far above what business
// data reaches (a B2B order of 50,000 lines is about 3.7 MB): an event over
// them is absurd, not large, and goes to the DLQ naming the limit. Large
// events are applied in parts within one transaction (cypher.Builder.Batches).
// The zero value of a field means its default.
type Limits struct {
	// MaxPayloadBytes bounds the stored payload. Default: 16 MiB.
	MaxPayloadBytes int
	// MaxOrderLines bounds the lines of an OrderPlaced. Default: 50,000.
	MaxOrderLines int
}

// Default limits (docs/adr/0026-large-events.md).
const (
	DefaultMaxPayloadBytes = 16 << 20
	DefaultMaxOrderLines   = 50_000
)

// WithDefaults fills the zero fields.
func (l Limits) WithDefaults() Limits {
	if l.MaxPayloadBytes == 0 {
		l.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if l.MaxOrderLines == 0 {
		l.MaxOrderLines = DefaultMaxOrderLines
	}
	return l
}

// Validate checks the limits are usable.
func (l Limits) Validate() error {
	if l.MaxPayloadBytes < 0 || l.MaxOrderLines < 0 {
		return fmt.Errorf("event limits must be positive: max payload bytes %d, max order lines %d", l.MaxPayloadBytes, l.MaxOrderLines)
	}
	return nil
}

// Decode is DecodeWithin with the default limits.
func Decode(r Record) (Event, error) { return DecodeWithin(r, Limits{}) }

// DecodeWithin turns a stored row into the current version of its event,
// upcasting an older event_version, and validates it, the limits included.
// Payload keys the event does not define are ignored. The error text reads
// like `OrderPlaced v1 (outbox id 42): lines[1].quantity must be > 0, got -3`.
func DecodeWithin(r Record, limits Limits) (Event, error) {
	ev, err := decode(r, limits.WithDefaults())
	if err != nil {
		kind := ErrInvalidPayload
		if errors.Is(err, ErrUnknownEvent) {
			kind = ErrUnknownEvent
		}
		where := ""
		if r.OutboxID != 0 {
			where = fmt.Sprintf(" (outbox id %d)", r.OutboxID)
		}
		name := r.EventType
		if _, known := catalog[name]; !known {
			name = fmt.Sprintf("%.64q", name) // producer text: quoted and bounded
		}
		return nil, &eventError{kind: kind, msg: fmt.Sprintf("%s v%d%s: %s", name, r.EventVersion, where, err)}
	}
	return ev, nil
}

func decode(r Record, limits Limits) (Event, error) {
	if len(r.Payload) > limits.MaxPayloadBytes {
		return nil, fmt.Errorf("payload is %d bytes, over the limit of %d (max payload bytes)", len(r.Payload), limits.MaxPayloadBytes)
	}
	k, known := catalog[r.EventType]
	if !known {
		return nil, fmt.Errorf("%w type", ErrUnknownEvent)
	}
	entry, known := k.versions[r.EventVersion]
	if !known {
		return nil, fmt.Errorf("%w version (known: %s)", ErrUnknownEvent, knownVersions(k.versions))
	}
	if r.AggregateType != entry.aggregateType {
		return nil, fmt.Errorf("aggregate_type must be %q, got %.64q", entry.aggregateType, r.AggregateType)
	}
	if r.AggregateID <= 0 {
		return nil, fmt.Errorf("aggregate_id must be > 0, got %d", r.AggregateID)
	}
	doc, err := parseObject(r.Payload)
	if err != nil {
		return nil, err
	}
	// encoding/json fills a field from any key equal to its name but for
	// case, the last one winning, while the checks here read exact keys: a
	// payload with "version": 3 and "VERSION": 2147483647 passed as version
	// 3 and was stored as the other, pinning the node.
	if a, b, found := caseTwins(doc, ""); found {
		return nil, fmt.Errorf("payload keys %.64q and %.64q differ only in case: which one counts is ambiguous", a, b)
	}
	for _, path := range entry.required {
		if err := requirePath(doc, path); err != nil {
			return nil, err
		}
	}
	if id, present := doc["id"]; present && id != nil {
		if n, ok := id.(json.Number); !ok || n.String() != fmt.Sprint(r.AggregateID) {
			return nil, fmt.Errorf("id %.32v does not match aggregate_id %d", id, r.AggregateID)
		}
	}
	ev, err := entry.decode(r.Payload, doc)
	if err != nil {
		return nil, locateInArrays(err, doc)
	}
	if placed, ok := ev.(OrderPlaced); ok && len(placed.Lines) > limits.MaxOrderLines {
		return nil, fmt.Errorf("lines has %d entries, over the limit of %d (max order lines)", len(placed.Lines), limits.MaxOrderLines)
	}
	if ev, err = k.withID(ev, r.AggregateID); err != nil {
		return nil, err
	}
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	return ev, nil
}

// Current returns the current event_version of an event type, and false for
// a type outside the catalog.
func Current(eventType string) (int16, bool) {
	k, known := catalog[eventType]
	if !known {
		return 0, false
	}
	return k.sample.EventVersion(), true
}

type catalogEntry struct {
	aggregateType string
	// required are payload paths that must be present and not null:
	// "a.b" is checked only when "a" is present, "a[].b" for every element.
	required []string
	decode   func(payload []byte, doc map[string]any) (Event, error)
	// shape is the type decode reads the payload into: its fields' JSON
	// names are the keys the case check guards (eventFields).
	shape reflect.Type
}

// entryOf is a catalog entry whose payload decodes straight into T.
func entryOf[T Event](aggregateType string, required []string) catalogEntry {
	return catalogEntry{aggregateType, required, decodeAs[T], reflect.TypeFor[T]()}
}

func knownVersions(versions map[int16]catalogEntry) string {
	var list []string
	for v := range versions {
		list = append(list, fmt.Sprint(v))
	}
	slices.Sort(list)
	return strings.Join(list, ", ")
}

func decodeAs[T Event](payload []byte, _ map[string]any) (Event, error) {
	var ev T
	if err := unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// parseObject reads a payload as a JSON object, keeping numbers exact.
func parseObject(payload []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, jsonError(err)
	}
	// Anything but white space after the object (dec.More does not see a
	// stray "}" or "]").
	if rest := payload[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) > 0 {
		return nil, errors.New("payload has data after the JSON object")
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("payload must be a JSON object, got %s", jsonKind(doc))
	}
	return obj, nil
}

// caseTwins finds two keys of one object, anywhere in v, that encoding/json
// would both match to one field of an event: equal under Unicode simple
// case folding (the Kelvin sign too), and folding to a field's JSON name.
// Keys no event reads stay free ("traceId" beside "traceID"). It returns
// them with their path.
func caseTwins(v any, at string) (string, string, bool) {
	switch v := v.(type) {
	case map[string]any:
		folded := make(map[string]string, len(v))
		for key, value := range v {
			fold := foldKey(key)
			if other, seen := folded[fold]; seen && eventFields[fold] {
				a, b := min(key, other), max(key, other)
				return at + a, at + b, true
			}
			folded[fold] = key
			if a, b, found := caseTwins(value, at+key+"."); found {
				return a, b, true
			}
		}
	case []any:
		for i, value := range v {
			if a, b, found := caseTwins(value, fmt.Sprintf("%s[%d].", strings.TrimSuffix(at, "."), i)); found {
				return a, b, true
			}
		}
	}
	return "", "", false
}

// eventFields are the folded JSON names of every field a catalog entry
// decodes (its shape), at any depth.
var eventFields = func() map[string]bool {
	fields := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Record]().PkgPath() {
			return // time.Time and the like are values, not objects of fields
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case f.Anonymous && name == "":
				walk(f.Type) // an embedded state: its fields are the event's
				continue
			case name == "":
				name = f.Name
			}
			fields[foldKey(name)] = true
			walk(f.Type)
		}
	}
	for _, k := range catalog {
		for _, entry := range k.versions {
			walk(entry.shape)
		}
	}
	return fields
}()

// foldKey maps every rune of s to the smallest rune of its case-folding
// orbit, so that keys equal under strings.EqualFold get the same foldKey.
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		smallest := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			smallest = min(smallest, f)
		}
		return smallest
	}, s)
}

func requirePath(doc map[string]any, path string) error {
	return requireIn(doc, path, "")
}

func requireIn(obj map[string]any, path, prefix string) error {
	head, rest, nested := strings.Cut(path, ".")
	name, isArray := strings.CutSuffix(head, "[]")
	value, present := obj[name]
	if !present || value == nil {
		if prefix != "" || !nested {
			return fmt.Errorf("%s%s is required", prefix, name)
		}
		return nil // optional parent absent: "category.id" with no category
	}
	if !nested {
		return nil
	}
	if !isArray {
		child, ok := value.(map[string]any)
		if !ok {
			return fmt.Errorf("%s%s must be an object, got %s", prefix, name, jsonKind(value))
		}
		return requireIn(child, rest, prefix+name+".")
	}
	items, ok := value.([]any)
	if !ok {
		return fmt.Errorf("%s%s must be an array, got %s", prefix, name, jsonKind(value))
	}
	for i, item := range items {
		child, ok := item.(map[string]any)
		if !ok {
			return fmt.Errorf("%s%s[%d] must be an object, got %s", prefix, name, i, jsonKind(item))
		}
		if err := requireIn(child, rest, fmt.Sprintf("%s%s[%d].", prefix, name, i)); err != nil {
			return err
		}
	}
	return nil
}

// locateInArrays names the array index of a value that does not fit its
// field ("lines.quantity" becomes "lines[3].quantity"): encoding/json names
// the field but not the element.
func locateInArrays(err error, doc map[string]any) error {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) || doc == nil {
		return err
	}
	field := jsonPath(typeErr.Field)
	parts := strings.Split(field, ".")
	if len(parts) != 2 {
		return err
	}
	list, ok := doc[parts[0]].([]any)
	if !ok {
		return err
	}
	for i, elem := range list {
		obj, ok := elem.(map[string]any)
		if !ok {
			continue
		}
		if jsonValueText(obj[parts[1]]) == typeErr.Value {
			return &typeError{msg: typeMessage(fmt.Sprintf("%s[%d].%s", parts[0], i, parts[1]), typeErr), err: typeErr}
		}
	}
	return err
}

func unmarshal(payload []byte, v any) error {
	if err := json.Unmarshal(payload, v); err != nil {
		return jsonError(err)
	}
	return nil
}

func typeMessage(field string, typeErr *json.UnmarshalTypeError) string {
	if strings.HasPrefix(typeErr.Value, "number") {
		return fmt.Sprintf("%s does not fit: got JSON %s, want %s", field, typeErr.Value, typeErr.Type)
	}
	return fmt.Sprintf("%s has the wrong type: got JSON %s, want %s", field, typeErr.Value, typeErr.Type)
}

// jsonValueText describes a decoded value the way encoding/json's
// UnmarshalTypeError.Value does.
func jsonValueText(v any) string {
	switch x := v.(type) {
	case json.Number:
		return "number " + x.String()
	case string:
		return "string"
	case bool:
		return "bool"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return ""
}

// typeError is a field of the wrong type, or a number out of its range.
type typeError struct {
	msg string
	err *json.UnmarshalTypeError
}

func (e *typeError) Error() string { return e.msg }
func (e *typeError) Unwrap() error { return e.err }

// jsonError rewrites encoding/json errors into field-named messages.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := jsonPath(typeErr.Field)
		if field == "" {
			field = "payload"
		}
		return &typeError{msg: typeMessage(field, typeErr), err: typeErr}
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("payload is not valid JSON at offset %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.EOF):
		return errors.New("payload is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("payload is not valid JSON: it ends early")
	default:
		return fmt.Errorf("payload does not decode: %v", err)
	}
}

// jsonPath drops the Go names of embedded structs ("OrderState.total_cents")
// from an encoding/json field path: payload keys are all lower case.
func jsonPath(field string) string {
	var keys []string
	for _, part := range strings.Split(field, ".") {
		if part != "" && !(part[0] >= 'A' && part[0] <= 'Z') {
			keys = append(keys, part)
		}
	}
	return strings.Join(keys, ".")
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}
