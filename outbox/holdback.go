package outbox

// AggregateKey names one aggregate: the unit of ordering, of one batch in
// flight, and of hold-back.
type AggregateKey struct {
	TenantID      int64
	AggregateType string
	AggregateID   int64
}

// Aggregate returns the key of m's aggregate.
func (m Message) Aggregate() AggregateKey {
	return AggregateKey{m.TenantID, m.AggregateType, m.AggregateID}
}

// HoldBack is the block-on-error rule, in one place for the claim, the
// relay and every sink: once a message of an aggregate fails, or is held
// back itself, every later message (higher id) of that aggregate is held
// back too, since applying it would put the aggregate's later state ahead
// of the missing one. The zero value holds nothing back.
type HoldBack struct {
	// from is the lowest id held per aggregate.
	from map[AggregateKey]int64
}

// Hold marks m as failed or held: the later messages of its aggregate are
// held back from now on.
func (h *HoldBack) Hold(m Message) {
	if h.from == nil {
		h.from = map[AggregateKey]int64{}
	}
	k := m.Aggregate()
	if id, ok := h.from[k]; !ok || m.ID < id {
		h.from[k] = m.ID
	}
}

// Holds reports whether m is held back: an earlier message of its
// aggregate failed or was held.
func (h *HoldBack) Holds(m Message) bool {
	id, ok := h.from[m.Aggregate()]
	return ok && m.ID > id
}

// Behind splits messages (of one batch) into those that may be delivered
// and the ids of those held back behind one of failed.
func Behind(messages, failed []Message) (deliver []Message, held []int64) {
	var h HoldBack
	for _, f := range failed {
		h.Hold(f)
	}
	for _, m := range messages {
		if h.Holds(m) {
			held = append(held, m.ID)
			continue
		}
		deliver = append(deliver, m)
	}
	return deliver, held
}
