// Package proctest reads Linux's /proc for tests that check processes and
// threads: their parent, session and nice value.
package proctest

import (
	"fmt"
	"os"
	"strings"
)

// Field indexes into StatFields' result (the stat line's fields from the
// 3rd on; proc(5) numbers them from 1).
const (
	State   = 0  // field 3
	Parent  = 1  // field 4
	Session = 3  // field 6
	Nice    = 16 // field 19
)

// StatFields are the fields of a /proc stat file (/proc/PID/stat,
// /proc/PID/task/TID/stat) after the command name in parentheses, which
// may hold spaces.
func StatFields(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) <= Nice {
		return nil, fmt.Errorf("%s: %d fields after the name", path, len(fields))
	}
	return fields, nil
}
