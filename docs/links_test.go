package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is where README.md lives; go test runs in docs/.
const repoRoot = ".."

var (
	// inlineLink matches [text](target) and ![alt](target); the target
	// ends at the first space (a title may follow) or closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// referenceLink matches a definition line: [label]: target
	referenceLink = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	inlineCode    = regexp.MustCompile("`+[^`]*`+")
	heading       = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// TestRelativeLinksResolve reads every Markdown file of the repository
// (README.md, docs/**, scripts/README.md, ...) and fails for each relative
// link whose file does not exist, and for each #anchor into a Markdown file
// that names no heading of it (GitHub's heading ids).
func TestRelativeLinksResolve(t *testing.T) {
	files, err := markdownFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d Markdown files under %s; expected README.md and the docs pages", len(files), repoRoot)
	}
	for _, file := range files {
		for _, problem := range brokenLinks(file) {
			t.Errorf("%s", problem)
		}
	}
}

// TestBrokenLinkIsFound proves the check can fail: a page with a link to a
// missing file and one to a missing heading gives two problems.
func TestBrokenLinkIsFound(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "page.md")
	other := filepath.Join(dir, "other.md")
	writeFile(t, other, "# Other page\n\n## Wake modes\n")
	writeFile(t, page, "# Page\n\nSee [missing](missing.md), [there](other.md#wake-modes), "+
		"[nowhere](other.md#no-such-heading), [here](#page) and [web](https://example.com/x.md).\n\n"+
		"```\n[in a fence](not-checked.md)\n```\n\nAnd `[in code](not-checked.md)`.\n")
	problems := brokenLinks(page)
	if len(problems) != 2 {
		t.Fatalf("want 2 problems (missing.md, #no-such-heading), got %d: %q", len(problems), problems)
	}
	if !strings.Contains(problems[0], "missing.md") || !strings.Contains(problems[1], "no-such-heading") {
		t.Fatalf("problems name the wrong links: %q", problems)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// markdownFiles lists *.md under root, leaving out hidden folders (.git,
// .local) and build output.
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "target" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// brokenLinks returns one line per link of file that does not resolve.
func brokenLinks(file string) []string {
	text, err := os.ReadFile(file)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", file, err)}
	}
	var problems []string
	for i, line := range proseLines(string(text)) {
		if line == "" {
			continue
		}
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range referenceLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if problem := checkTarget(file, target); problem != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s", file, i+1, target, problem))
			}
		}
	}
	return problems
}

// proseLines returns the file's lines with fenced code blocks blanked and
// inline code removed (a link shown as code is not a link), keeping line
// numbers.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
			continue
		}
		lines[i] = inlineCode.ReplaceAllString(line, "")
	}
	return lines
}

// checkTarget says what is wrong with one link target of file, or "".
func checkTarget(file, target string) string {
	if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	resolved := file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			resolved = filepath.Join(repoRoot, filepath.FromSlash(path))
		} else {
			resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		}
		if _, err := os.Stat(resolved); err != nil {
			return "no such file " + resolved
		}
	}
	if anchor == "" || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	ids, err := headingIDs(resolved)
	if err != nil {
		return err.Error()
	}
	if !ids[anchor] {
		return "no heading with id #" + anchor + " in " + resolved
	}
	return ""
}

// headingIDs returns the ids GitHub gives the headings of a Markdown file:
// lower case, punctuation dropped, spaces as dashes, -1, -2 ... for repeats.
func headingIDs(file string) (map[string]bool, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(text), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		id := slug(m[1])
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids, nil
}

func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
