//go:build cgo

package embed

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchTexts are product texts of the size sync embeds (a name and a
// short description, 20 to 40 word pieces), all different.
func benchTexts(n int) []string {
	adjectives := []string{"wireless", "stainless steel", "organic cotton", "ergonomic", "portable", "waterproof", "compact", "rechargeable"}
	nouns := []string{"speaker", "kettle", "t-shirt", "office chair", "espresso maker", "backpack", "desk lamp", "headphones"}
	uses := []string{"for the kitchen", "for camping trips", "for long working days", "for music lovers", "for small apartments", "for travel"}
	texts := make([]string, n)
	for i := range texts {
		texts[i] = fmt.Sprintf("%s %s, model %d. A %s %s %s with a two-year warranty, available in %d colours and shipped within %d days.",
			adjectives[i%len(adjectives)], nouns[(i/8)%len(nouns)], 1000+i,
			adjectives[(i+3)%len(adjectives)], nouns[(i/8)%len(nouns)], uses[i%len(uses)], 2+i%5, 1+i%4)
	}
	return texts
}

// BenchmarkEmbed is the bare model loop: 256 product texts embedded in
// batches of 1, 16, 32 and 64, for the float32 model and its int8 variant.
// It reports texts/s, CPU milliseconds per text, the model's load time and the process's resident
// memory (VmRSS now, VmHWM its peak so far: the sub-benchmarks run in one
// process, in this order).
//
//	make bench-model   (go test -run '^$' -bench BenchmarkEmbed -benchtime 1x ./embed)
func BenchmarkEmbed(b *testing.B) {
	texts := benchTexts(256)
	for _, variant := range []string{DefaultModel, DefaultModel + "-q"} {
		b.Run(variant, func(b *testing.B) {
			start := time.Now()
			e, err := Open(Config{ModelDir: modelDir(variant)})
			if err != nil {
				b.Fatalf("open %s (run make model first): %v", variant, err)
			}
			loadSeconds := time.Since(start).Seconds()
			defer e.Close()
			for _, batch := range []int{1, 16, 32, 64} {
				b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
					onnx := e.(*onnxEmbedder)
					onnx.batchSize = batch
					cpuBefore := cpuSeconds()
					b.ResetTimer()
					for b.Loop() {
						for i := 0; i < len(texts); i += batch {
							if _, err := e.Embed(context.Background(), texts[i:min(i+batch, len(texts))]); err != nil {
								b.Fatal(err)
							}
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(len(texts)*b.N)/b.Elapsed().Seconds(), "texts/s")
					// CPU time per text tells less of the machine's other
					// load than texts/s does.
					b.ReportMetric((cpuSeconds()-cpuBefore)*1000/float64(len(texts)*b.N), "cpu-ms/text")
					b.ReportMetric(loadSeconds, "load-s")
					rss, peak := residentMB()
					b.ReportMetric(rss, "rss-MB")
					b.ReportMetric(peak, "peak-rss-MB")
				})
			}
		})
	}
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

// residentMB reads VmRSS and VmHWM from /proc/self/status.
func residentMB() (rss, peak float64) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak
}
