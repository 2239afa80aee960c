// Package proctest reads Linux's /proc for tests that check processes and
// threads: their parent, session and nice value.
package proctest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
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

// ThreadStats reads the stat fields of every thread of process pid, by
// thread id; a thread that ends while they are read is left out.
func ThreadStats(pid int) (map[int][]string, error) {
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		return nil, err
	}
	threads := map[int][]string{}
	for _, path := range paths {
		tid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		fields, err := StatFields(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended since the glob
		}
		if err != nil {
			return nil, err
		}
		threads[tid] = fields
	}
	if len(threads) == 0 {
		return nil, fmt.Errorf("no threads of process %d", pid)
	}
	return threads, nil
}
