package main

import "testing"

// TestTextChangesGoRoundTheProducts: one probe in textEvery changes a text,
// and every product's text changes as often as any other's, whatever the
// number of products against textEvery.
func TestTextChangesGoRoundTheProducts(t *testing.T) {
	for _, c := range []struct{ products, textEvery int }{{60, 20}, {59, 20}, {60, 61}, {7, 3}, {10, 20}, {4, 1}} {
		probes := c.products * c.textEvery * 5
		perProduct := make([]int, c.products)
		total := 0
		for n := range probes {
			if at, changeText := probeTarget(n, c.products, c.textEvery); changeText {
				perProduct[at]++
				total++
			}
		}
		if total != probes/c.textEvery {
			t.Errorf("%d products, every %d: %d text changes in %d probes, want %d", c.products, c.textEvery, total, probes, probes/c.textEvery)
		}
		for p, got := range perProduct {
			if got != 5 {
				t.Errorf("%d products, every %d: product %d changed %d times, want 5", c.products, c.textEvery, p, got)
			}
		}
	}
	for n := range 200 {
		if at, changeText := probeTarget(n, 60, 0); changeText || at != n%60 {
			t.Fatalf("textEvery 0, probe %d: product %d, text change %v; want product %d, price only", n, at, changeText, n%60)
		}
	}
}
