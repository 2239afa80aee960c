package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Fake but realistic data. Emails use example.com/example.org (reserved by
// RFC 2606) and phone numbers the fictional 555-01xx range, so nothing here
// can reach a real person.

var (
	tenantNames = []string{"Northwind Traders", "Contoso Retail", "Fabrikam Home", "Tailspin Outdoors",
		"Wingtip Goods", "Adventure Works", "Litware Books", "Proseware Kitchen"}
	tenantCurrencies = []string{"EUR", "USD", "GBP"}
	categoryNames    = []string{"Kitchen", "Garden", "Electronics", "Books", "Toys", "Outdoor", "Office",
		"Beauty", "Sports", "Pets", "Music", "Tools"}
	firstNames = []string{"Anna", "Ben", "Chloé", "Daniel", "Elif", "Finn", "Grace", "Hugo", "Ines", "Jonas",
		"Kira", "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tara", "Uwe", "Vera",
		"Wei", "Yara", "Zoë"}
	lastNames = []string{"Andersen", "Becker", "Costa", "Dubois", "Eriksen", "Fischer", "García", "Hansen",
		"Ivanova", "Jansen", "Kowalski", "Larsen", "Müller", "Nowak", "O'Brien", "Petit", "Rossi",
		"Schmidt", "Tanaka", "Weber"}
	streets   = []string{"Elm Street", "Harbour Road", "Lindenallee", "Rue des Lilas", "Market Square", "Mill Lane", "Kanaalweg", "Via Roma"}
	countries = []struct{ code, city, dial string }{
		{"DE", "Berlin", "+49"}, {"FR", "Lyon", "+33"}, {"NL", "Utrecht", "+31"}, {"GB", "Leeds", "+44"},
		{"US", "Springfield", "+1"}, {"ES", "Valencia", "+34"}, {"IT", "Torino", "+39"}, {"PL", "Gdańsk", "+48"},
	}
	segments        = []string{"retail", "retail", "retail", "business", "vip"}
	productAdjects  = []string{"Classic", "Compact", "Deluxe", "Eco", "Ergonomic", "Heavy-Duty", "Portable", "Smart", "Vintage", "Wireless"}
	productNouns    = []string{"Blender", "Backpack", "Desk Lamp", "Headphones", "Kettle", "Notebook", "Planter", "Puzzle", "Speaker", "Tent", "Toolkit", "Yoga Mat"}
	descriptionBits = []string{"Built to last.", "Ships in recycled packaging.", "Two-year warranty.", "Customer favourite.",
		"Now with a longer cable.", "Dishwasher safe.", "Fits in a carry-on.", "Made from 60% recycled material."}
)

func pick[T any](rng *rand.Rand, list []T) T { return list[rng.IntN(len(list))] }

func tenantName(index int) string {
	name := tenantNames[index%len(tenantNames)]
	if round := index / len(tenantNames); round > 0 {
		name = fmt.Sprintf("%s %d", name, round+1)
	}
	return name
}

func categoryName(index int) string {
	name := categoryNames[index%len(categoryNames)]
	if round := index / len(categoryNames); round > 0 {
		name = fmt.Sprintf("%s %d", name, round+1)
	}
	return name
}

type fakeCustomer struct {
	email, fullName, phone, address, segment, countryCode string
}

// newFakeCustomer makes customer number index of a tenant; index keeps the
// email unique within the tenant.
func newFakeCustomer(rng *rand.Rand, index int) fakeCustomer {
	first, last := pick(rng, firstNames), pick(rng, lastNames)
	country := pick(rng, countries)
	domain := "example.com"
	if rng.IntN(3) == 0 {
		domain = "example.org"
	}
	return fakeCustomer{
		email:       fmt.Sprintf("%s.%s.%d@%s", emailPart(first), emailPart(last), index+1, domain),
		fullName:    first + " " + last,
		phone:       fmt.Sprintf("%s 555-01%02d", country.dial, rng.IntN(100)),
		address:     fmt.Sprintf("%d %s, %05d %s, %s", 1+rng.IntN(200), pick(rng, streets), 10000+rng.IntN(89999), country.city, country.code),
		segment:     pick(rng, segments),
		countryCode: country.code,
	}
}

func emailPart(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r)
		case r == 'é':
			b.WriteRune('e')
		case r == 'ü':
			b.WriteString("ue")
		case r == 'í':
			b.WriteRune('i')
		case r == 'ë':
			b.WriteRune('e')
		}
	}
	return b.String()
}

func productName(rng *rand.Rand) string {
	return pick(rng, productAdjects) + " " + pick(rng, productNouns)
}

func productDescription(rng *rand.Rand) string {
	first := pick(rng, descriptionBits)
	second := pick(rng, descriptionBits)
	if first == second {
		return first
	}
	return first + " " + second
}

// priceCents is a shop-like price: 4.99 to 249.99.
func priceCents(rng *rand.Rand) int64 {
	return int64(5+rng.IntN(245))*100 - 1
}

// traceID is a W3C-shaped trace id (32 hex digits) drawn from the writer's rng,
// so it is deterministic for a seed.
func traceID(rng *rand.Rand) string {
	return fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
}
