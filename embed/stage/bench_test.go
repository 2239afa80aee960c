package stage_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"graphsync/embed/stage"
	"graphsync/events"
	"graphsync/internal/stacktest"
)

var stageTexts = flag.Int("stage-texts", 512, "BenchmarkStageEmbeddings: products embedded")

// BenchmarkStageEmbeddings: the stage's embeddings/s (read pending, cache
// lookup, embed, cache write, guarded write) against the same run's bare
// model loop over the same texts in batches of the same size (target: a
// ratio >= 0.8). -stage-texts sets how many products (default 512).
//
//	. .local/services.env && go test -run '^$' -bench StageEmbeddings -benchtime 1x ./embed/stage
func BenchmarkStageEmbeddings(b *testing.B) {
	texts := *stageTexts
	for range b.N {
		w := newWorld(b)
		var evs []events.Event
		var bare []string
		for i := int64(1); i <= int64(texts); i++ {
			p := productState(w.id(i), 1, fmt.Sprintf("Product %d", i),
				fmt.Sprintf("Handmade item number %d: a sturdy, useful thing for the kitchen, the garden or the desk, in colour %d.", i, i%17), 100+i)
			evs = append(evs, events.ProductCreated{ProductState: p})
			bare = append(bare, p.Name+"\n"+p.Description)
		}
		for start := 0; start < len(evs); start += 500 {
			w.deliver(evs[start:min(start+500, len(evs))]...)
		}
		const batch = 64
		s := w.stage(stage.Config{BatchSize: batch})

		bareLoop := func() time.Duration {
			start := time.Now()
			for i := 0; i < len(bare); i += batch {
				if _, err := w.emb.Embedder.Embed(w.ctx, bare[i:min(i+batch, len(bare))]); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(start)
		}
		// The bare loop before and after the stage; the faster counts, so
		// that the machine's noise does not flatter the ratio.
		b.ResetTimer()
		bareTook := bareLoop()
		start := time.Now()
		round, err := s.Drain(w.ctx)
		stageTook := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		bareAfter := bareLoop()
		b.StopTimer()
		b.Logf("bare model loop before the stage %s, after %s", bareTook.Round(time.Millisecond), bareAfter.Round(time.Millisecond))
		bareTook = min(bareTook, bareAfter)
		if round.Embedded != texts || round.Written != texts {
			b.Fatalf("stage embedded %d and wrote %d of %d texts", round.Embedded, round.Written, texts)
		}
		bareRate := float64(texts) / bareTook.Seconds()
		stageRate := float64(texts) / stageTook.Seconds()
		b.ReportMetric(stageRate, "stage_texts/s")
		b.ReportMetric(bareRate, "bare_texts/s")
		b.ReportMetric(stageRate/bareRate, "ratio")
		b.Logf("%d texts, batches of %d: bare model loop %.1f texts/s (%s), stage %.1f texts/s (%s, of which in the embedder %s), ratio %.2f",
			texts, batch, bareRate, bareTook.Round(time.Millisecond), stageRate, stageTook.Round(time.Millisecond),
			round.EmbedTook.Round(time.Millisecond), stageRate/bareRate)
		stacktest.CleanGraph(b, w.driver, w.tenant)
	}
}
