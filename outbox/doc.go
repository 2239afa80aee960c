// Package outbox is the contract between the relay and a sink: Message (one
// outbox row as the relay hands it over), Sink (what receives batches of
// them) and the errors a sink answers with. relay implements the delivering
// side, projector a Sink; each imports this package and not the other, so a
// sink links the contract and not the relay, pgx or pglogrepl behind it.
// Package outbox/sinktest is its conformance suite, run against every Sink.
//
// It holds types and rules only: it must not talk to a database, start a
// goroutine or import relay, projector or a driver.
package outbox
