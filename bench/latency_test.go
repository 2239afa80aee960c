package main

import "testing"

// TestTextChangesGoRoundTheProducts: one probe in textEvery changes a text,
// and every product's text changes as often as any other's, whatever the
// number of products against textEvery.
func TestTextChangesGoRoundTheProducts(t *testing.T) {
	for _, c := range []struct{ products, textEvery int }{{60, 20}, {7, 3}, {10, 20}, {4, 1}} {
		probes := c.products * c.textEvery * 5
		perProduct := make([]int, c.products)
		total := 0
		for n := range probes {
			if changesText(n, c.products, c.textEvery) {
				perProduct[n%c.products]++
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
	if changesText(0, 60, 0) {
		t.Errorf("textEvery 0 changes a text")
	}
}
