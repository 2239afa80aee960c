// Package layout holds tests of the module's import graph; it has no code.
package layout
