package events

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// maxVersion is the largest version a row can have: products.version and
// sales_orders.version are INTEGER. A larger one would pin the node, and the
// guards would skip every correct event after it.
const maxVersion = math.MaxInt32

func checkVersion(version int64) error {
	if version < 1 {
		return fmt.Errorf("version must be >= 1, got %d", version)
	}
	if version > maxVersion {
		return fmt.Errorf("version must be <= %d (the version columns are INTEGER), got %d", maxVersion, version)
	}
	return nil
}

// checkText bounds a string's length in characters.
func checkText(field, value string, minLen, maxLen int) error {
	n := utf8.RuneCountInString(value)
	if n < minLen {
		if minLen == 1 {
			return fmt.Errorf("%s must not be empty", field)
		}
		return fmt.Errorf("%s must have at least %d characters, got %d", field, minLen, n)
	}
	if n > maxLen {
		return fmt.Errorf("%s must have at most %d characters, got %d", field, maxLen, n)
	}
	return nil
}

func checkCurrency(field, value string) error {
	if !isUpperASCII(value, 3) {
		return fmt.Errorf("%s must be three upper-case letters, got %.64q", field, value)
	}
	return nil
}

func isUpperASCII(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}
