package graphmodel

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestPersonalData(t *testing.T) {
	for text, want := range map[string]string{
		"write to ada.planted@example.org for a quote":           "an e-mail address",
		"call +44 20 7946 0958 after six":                        "a phone number",
		"or +1 (555) 123-4567":                                   "a phone number",
		"US office 555-123-4567":                                 "a phone number",
		"ring (555) 123-4567 today":                              "a phone number",
		"Berlin (030) 1234 5678":                                 "a phone number",
		"pasted +44\u00a020\u00a07946\u00a00958":                 "a phone number",
		"tabbed 555\v123\v4567 or 555\u2009123\u20094567":        "a phone number",
		"schreib an jörg@exämple.de":                             "an e-mail address",
		"write to jose\u0301@example.com":                        "an e-mail address",
		"anna@mu\u0308ller.de":                                   "an e-mail address",
		"संपर्क: ज्योति@example.in":                              "an e-mail address",
		"info@उदाहरण.भारत":                                       "an e-mail address",
		"Tel 044 123 45 67":                                      "a phone number",
		"Tel 02 123 45 67":                                       "a phone number",
		"Tel. 030/1234567, Ruf 0171/1234567":                     "a phone number",
		"Milano 02 1234 5678":                                    "a phone number",
		"MHD 06 2025 500 g, Heft 05 2023 128 Seiten":             "",
		"Charge 01 2024 1000 Stück, Abholung 09 2024 1230":       "",
		"Version 01.2024.1234":                                   "",
		"Maße 045 120 60 80, Größen 034 036 38 40":               "",
		"Art.-Nr. 012 345 67 89, Preise 01 999 12 50":            "",
		"Hotel 044 123 45 67":                                    "",
		"see https://shop.example/p/0123/456789":                 "",
		"Natel: 079 123 45 67":                                   "a phone number",
		"☎ 02 123 45 67":                                         "a phone number",
		"Telefon 044 123 45 67 und 044 123 45 68":                "a phone number",
		"Hotline 24/7: 044 123 45 67":                            "a phone number",
		"Tel. (Mo-Fr 8-17 Uhr) 044 123 45 67":                    "a phone number",
		"Tél. 021 123 45 67":                                     "a phone number",
		"Telefonnummer : 044 123 45 67":                          "a phone number",
		"Tel. 02 2024 5678":                                      "a phone number",
		"Mobiliar, Maße 045 120 60 80":                           "",
		"Fonduegabel 012 345 67 89, Kontaktlinsen 012 345 67 88": "",
		"https://shop.example/p-0123/456789 and https://shop.example/?id=0123/456788": "",
		"Service client : 01 23 45 67 89":                                             "a phone number",
		"mobile 06.12.34.56.78":                                                       "a phone number",
		"Berlin 030 1234567, mobil 0171 1234567":                                      "a phone number",
		"aus dem Ausland 0049 30 1234567":                                             "a phone number",
		"bel 06-12345678":                                                             "a phone number",
		"UK 07700 900123 or 0800 123 4567":                                            "a phone number",
		"UK office 020 7946 0958":                                                     "a phone number",
		"Tel/Fax 030 1234567 030 7654321":                                             "a phone number",
		"Tel 030 1234567 2024":                                                        "a phone number",
		"Ruf 030 1234567 10115 Berlin":                                                "a phone number",
		"Stand 01.02.2024 030 1234567":                                                "a phone number",
		"aus dem Ausland 0049 30 1234567 12":                                          "a phone number",
		"made 01.02.2024, batch 0.5 l":                                                "",
		"sizes 04 06 08":                                                              "",
		"Lieferbar ab 01.03.2025 09:00 Uhr":                                           "",
		"gültig 01.01.2025-31.12.2025":                                                "",
		"Datum 01.02.2024 10":                                                         "",
		"open 08.00-12.00 13.00-17.00":                                                "",
		"Lot 0123 4567 89, Modell 0042.1500.30":                                       "",
		"parts 0001-0002-0003":                                                        "",
		"DN 050 065 080 100, Grössen 036 038 040 042":                                 "",
		"sizes 04 06 08 10 12 14":                                                     "",
		"prices 09.99 19.99 29.99":                                                    "",
		"Berlin 0049 30 12345678, 0049 171 1234567":                                   "a phone number",
		"London 0044 7700 900123":                                                     "a phone number",
		"EAN 5 012345 678900, 4 012345 678901":                                        "",
		"UPC 0 036000 291452":                                                         "",
		"part no. 5551234567, 2 pack":                                                 "",
		"model (2024) 1500-2000 rpm":                                                  "",
		"A mug, 350 ml, SKU-1":                                                        "",
		"placed 2026-05-01T12:00:00Z, total 19.99 EUR":                                "",
		"order 1000042 of customer 500017":                                            "",
	} {
		if got := PersonalData(text); got != want {
			t.Errorf("PersonalData(%q) = %q, want %q", text, got, want)
		}
		masked := MaskPersonalData(text)
		if want == "" && masked != text {
			t.Errorf("MaskPersonalData changed %q to %q", text, masked)
		}
		if want != "" && (PersonalData(masked) != "" || !strings.Contains(masked, "removed]")) {
			t.Errorf("MaskPersonalData(%q) = %q: personal data left", text, masked)
		}
	}
}

// The cheap test in front of the patterns never lets personal data through:
// every text the patterns match passes it, down to the shortest number, in
// the cases above and in random groups of digits apart by separators of
// every kind; what it lets skip (a digest, a SKU) is what it is for.
func TestMayHoldPersonalDataKeepsEveryMatch(t *testing.T) {
	for _, text := range []string{"+1 2 34 56", "(01) 234 567", "555-123-4567", "a@b.de", "+44 20 7946 0958",
		"call +44 20 7946 0958 after six", "Tel. 030/1234567", "pasted +44\u00a020\u00a07946\u00a00958",
		"tabbed 555\v123\v4567 or 555\u2009123\u20094567", "Berlin 0049 30 12345678", "06.12.34.56.78", "é+123456", "(030)1234567"} {
		if matchPersonalData(text) == "" {
			t.Errorf("%q: the patterns no longer match it; pick another case", text)
		}
		if !mayHoldPersonalData(text) {
			t.Errorf("%q holds %s, but the cheap test skips it", text, matchPersonalData(text))
		}
	}
	if PersonalData("+1 2 34 56") == "" {
		t.Fatal("the shortest phone number minPhoneDigits assumes no longer matches: update it")
	}
	for _, text := range []string{"+1 2 34 5", "SKU-12345", "no digits here", "0612345678",
		EmbeddingHash("sentence-transformers/all-MiniLM-L6-v2", "A mug, 350 ml")} {
		if matchPersonalData(text) != "" || mayHoldPersonalData(text) {
			t.Errorf("%q: patterns %q, cheap test %v; want neither", text, matchPersonalData(text), mayHoldPersonalData(text))
		}
	}
	// Digit groups of the widths the patterns take, apart by one
	// separator of any kind (or none), after a lead that may be a +, a
	// bracket, a letter of any width or nothing.
	leads := []string{"", "", "+", "(", "0", "00", "a", "é", "Tel ", "€"}
	seps := []string{"", " ", "-", ".", "/", "\u00a0", "\u2009", "\v", "\t", ")", ") ", "é"}
	rng := rand.New(rand.NewPCG(1, 2))
	matched := 0
	for range 20000 {
		var b strings.Builder
		b.WriteString(leads[rng.IntN(len(leads))])
		for g := range 1 + rng.IntN(5) {
			if g > 0 {
				b.WriteString(seps[rng.IntN(len(seps))])
			}
			for range 1 + rng.IntN(5) {
				b.WriteByte(byte('0' + rng.IntN(10)))
			}
		}
		text := b.String()
		what := matchPersonalData(text)
		if what == "" {
			continue
		}
		matched++
		if !mayHoldPersonalData(text) {
			t.Fatalf("%q holds %s, but the cheap test skips it", text, what)
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d random texts held personal data: the test proves little", matched)
	}
}

// Masking touches the free text the model marks (FreeText) and nothing
// else: codes such as a SKU, numbers, other labels' keys. It copies a
// property map it changes and leaves the caller's alone.
func TestWithoutPersonalDataMasksFreeTextOnly(t *testing.T) {
	props := map[string]any{"description": "mail a@example.org", "price_cents": int64(5), "name": "Mug 555-123-4567",
		"sku": "KIT-100-250-1000"}
	customer := map[string]any{"segment": "vip a@example.org", "country_code": "DE"}
	ms := Mutations{Nodes: []NodeUpsert{{Label: LabelProduct, Props: props}, {Label: LabelCustomer, Props: customer}},
		Rels: []RelUpsert{{Type: RelContains, Props: map[string]any{"line_no": int64(1)}}}}
	out := Default.WithoutPersonalData(ms)
	if props["description"] != "mail a@example.org" || customer["segment"] != "vip a@example.org" {
		t.Fatalf("the caller's maps changed: %v %v", props, customer)
	}
	got := out.Nodes[0].Props
	if got["description"] != "mail [e-mail removed]" || got["name"] != "Mug [phone number removed]" ||
		got["price_cents"] != int64(5) || got["sku"] != "KIT-100-250-1000" {
		t.Errorf("product props = %v", got)
	}
	if got := out.Nodes[1].Props; got["segment"] != "vip [e-mail removed]" || got["country_code"] != "DE" {
		t.Errorf("customer props = %v", got)
	}
	if got := out.Rels[0].Props; len(got) != 1 || got["line_no"] != int64(1) {
		t.Errorf("relationship props = %v", got)
	}
	clean := map[string]any{"name": "Mug 350 ml"}
	if masked := Default.NodeWithoutPersonalData(NodeUpsert{Label: LabelCategory, Props: clean}).Props; len(masked) != 1 || masked["name"] != "Mug 350 ml" {
		t.Errorf("clean props = %v", masked)
	}
}

// One pass of the patterns can leave a number behind: digits right after a
// number the first pattern ended on form a 3-3-4 number of their own once
// the mask stands before them. Masking goes on until nothing matches.
func TestMaskPersonalDataLeavesNoneBehind(t *testing.T) {
	for _, text := range []string{"+1 2 3333 4444 5555 6666777 888 9999", "+49 30 1234 5678 9012 3456555-123-4567"} {
		if masked := MaskPersonalData(text); PersonalData(masked) != "" {
			t.Errorf("MaskPersonalData(%q) = %q, which still holds %s", text, masked, PersonalData(masked))
		}
	}
}

// Masking takes the whole number and nothing beside it. Checking a masked
// text with the same patterns cannot see a number cut in two (its rest is
// too short to match), so these are the exact outputs.
func TestMaskPersonalDataTakesWholeNumbers(t *testing.T) {
	for text, want := range map[string]string{
		"0044 20 7946 0958":                          "[phone number removed]",
		"Tel 0800 123 4567 0800 123 4568":            "Tel [phone number removed] [phone number removed]",
		"Tél. 01 23 45 67 89 7j/7":                   "Tél. [phone number removed] 7j/7",
		"Service 01.23.45.67.89 2 fois":              "Service [phone number removed] 2 fois",
		"Stand 01.02.2024 01 23 45 67 89":            "Stand 01.02.2024 [phone number removed]",
		"Hotline 0800 123 4567 24/7":                 "Hotline [phone number removed] 24/7",
		"Tel 030 1234567 2024":                       "Tel [phone number removed] 2024",
		"Tel/Fax 030 1234567 030 7654321":            "Tel/Fax [phone number removed] [phone number removed]",
		"DN 050 065 080 100":                         "DN 050 065 080 100",
		"mail राम@example.in":                        "mail [e-mail removed]",
		"Zürich, Tel. 044 123 45 67, 8001":           "Zürich, Tel. [phone number removed], 8001",
		"Maße 045 120 60 80":                         "Maße 045 120 60 80",
		"Tel.: 044 123 45 67 / 079 765 43 21":        "Tel.: [phone number removed] / [phone number removed]",
		"Telefon 044 123 45 67 und 044 123 45 68":    "Telefon [phone number removed] und [phone number removed]",
		"https://shop.example/p/0123/456789":         "https://shop.example/p/0123/456789",
		"Tel. 030/1234567 oder 02 1234 5678":         "Tel. [phone number removed] oder [phone number removed]",
		"Datum 01/02/2024":                           "Datum 01/02/2024",
		"sizes 04 06 08 10 12 14":                    "sizes 04 06 08 10 12 14",
		"EAN 5 012345 678900":                        "EAN 5 012345 678900",
		"call +44 20 7946 0958 after six":            "call [phone number removed] after six",
		"mail ada@example.org, 06-12345678":          "mail [e-mail removed], [phone number removed]",
		"Tel 0049 30 12345678 2024":                  "Tel [phone number removed] 2024",
		"Ruf 0049 30 1234567 10115 Berlin":           "Ruf [phone number removed] 10115 Berlin",
		"Tel 0049 30 1234567 0049 30 7654321":        "Tel [phone number removed] [phone number removed]",
		"Tel 0044 20 7946 0958 2024":                 "Tel [phone number removed] 2024",
		"Paris 0033 6 12 34 56 78":                   "Paris [phone number removed]",
		"Tél. 01 23 45 67 89 24h/24, 10h-19h":        "Tél. [phone number removed] 24h/24, 10h-19h",
		"Service 01 23 45 67 89 24/7":                "Service [phone number removed] 24/7",
		"Hotline 0800 123 4567 2024":                 "Hotline [phone number removed] 2024",
		"Filiale 1 030 1234567, Raum 4 0171 1234567": "Filiale 1 [phone number removed], Raum 4 [phone number removed]",
		"Monate 01 02 03 04 05 06 07 08 09 10 11 12": "Monate 01 02 03 04 05 06 07 08 09 10 11 12",
		"zwei 01 23 45 67 89 01 98 76 54 32":         "zwei [phone number removed] [phone number removed]",
		"Grössen 036 038 040 042":                    "Grössen 036 038 040 042",
	} {
		if got := MaskPersonalData(text); got != want {
			t.Errorf("MaskPersonalData(%q) = %q, want %q", text, got, want)
		}
		// StripPersonalData takes the same spans out, a space standing for each.
		if got, want := StripPersonalData(text), strings.NewReplacer(phoneMask, " ", emailMask, " ").Replace(want); got != want {
			t.Errorf("StripPersonalData(%q) = %q, want %q", text, got, want)
		}
	}
}
