// Package gotest runs go test in one module and reads what it says: it turns
// the go test -json stream back into go test's plain output, and keeps which
// tests passed, failed and were skipped, and why they were skipped.
package gotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json: a test2json event, or a build event
// (build-output, build-fail) of the go command.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// Skip is a skipped test and the reason it gave.
type Skip struct {
	Package, Test, Reason string
}

// Result is what one go test run reported.
type Result struct {
	Passed, Failed, Skipped int // tests and subtests
	FailedPackages          []string
	FailedTests             []string // top-level tests, as package.Test
	Skips                   []Skip
}

// Printer is an io.Writer for go test -json output. It writes to w what
// plain go test would print (everything, as go test -v does, when verbose):
// for a package that passes its ok line, for one that fails the output of
// its failed tests and its own. It marks each ok line with how many of the
// package's tests were skipped, since a package whose every test skipped
// still says "ok". Lines that are not JSON pass through.
type Printer struct {
	w       io.Writer
	verbose bool
	partial []byte
	res     Result
	// Output of tests still running, kept until a top-level test ends: by
	// package, then top-level test, in the order it came.
	pending map[string]map[string][]entry
	status  map[[2]string]string // package, test -> pass, fail or skip
	lines   map[string][]string  // a package's own output, by package
	skipped map[string]int       // by package
}

type entry struct{ test, line string }

// NewPrinter returns a Printer writing to w.
func NewPrinter(w io.Writer, verbose bool) *Printer {
	return &Printer{
		w:       w,
		verbose: verbose,
		pending: map[string]map[string][]entry{},
		status:  map[[2]string]string{},
		lines:   map[string][]string{},
		skipped: map[string]int{},
	}
}

// Write consumes whole lines of b and keeps any partial line for later.
func (p *Printer) Write(b []byte) (int, error) {
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		p.line(p.partial[:i+1])
		p.partial = p.partial[i+1:]
	}
}

// Result flushes a last partial line and returns what the run reported.
func (p *Printer) Result() Result {
	if len(p.partial) > 0 {
		p.line(append(p.partial, '\n'))
		p.partial = nil
	}
	return p.res
}

func (p *Printer) line(raw []byte) {
	var e event
	if raw[0] != '{' || json.Unmarshal(raw, &e) != nil || e.Action == "" {
		p.w.Write(raw)
		return
	}
	switch {
	case e.Action == "build-output":
		io.WriteString(p.w, e.Output)
	case e.Test != "" && e.Action == "output":
		p.testOutput(e)
	case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		p.testEnd(e)
	case e.Test == "" && e.Action == "output":
		p.packageOutput(e)
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		p.packageEnd(e)
	}
}

func (p *Printer) testOutput(e event) {
	if p.verbose {
		io.WriteString(p.w, e.Output)
	}
	top, _, _ := strings.Cut(e.Test, "/")
	tests := p.pending[e.Package]
	if tests == nil {
		tests = map[string][]entry{}
		p.pending[e.Package] = tests
	}
	tests[top] = append(tests[top], entry{e.Test, e.Output})
}

func (p *Printer) testEnd(e event) {
	p.status[[2]string{e.Package, e.Test}] = e.Action
	switch e.Action {
	case "pass":
		p.res.Passed++
	case "fail":
		p.res.Failed++
		if !strings.Contains(e.Test, "/") {
			p.res.FailedTests = append(p.res.FailedTests, e.Package+"."+e.Test)
		}
	case "skip":
		p.res.Skipped++
		p.skipped[e.Package]++
		p.res.Skips = append(p.res.Skips, Skip{e.Package, e.Test, p.reason(e.Package, e.Test)})
	}
	if strings.Contains(e.Test, "/") {
		return
	}
	if e.Action == "fail" && !p.verbose {
		p.flush(e.Package, e.Test)
	}
	delete(p.pending[e.Package], e.Test)
}

// flush writes what go test prints for a failed top-level test: its lines
// and those of its subtests that did not pass or skip.
func (p *Printer) flush(pkg, top string) {
	for _, en := range p.pending[pkg][top] {
		if s := p.status[[2]string{pkg, en.test}]; s == "pass" || s == "skip" || framing(en.line) {
			continue
		}
		io.WriteString(p.w, en.line)
	}
}

// packageOutput keeps a package's own lines until it ends: like go test,
// the printer shows them only for a package that fails.
func (p *Printer) packageOutput(e event) {
	if p.verbose {
		io.WriteString(p.w, p.marked(e.Package, e.Output))
		return
	}
	p.lines[e.Package] = append(p.lines[e.Package], e.Output)
}

func (p *Printer) packageEnd(e event) {
	if e.Action == "fail" {
		p.res.FailedPackages = append(p.res.FailedPackages, e.Package)
	}
	if !p.verbose {
		// Whatever tests were still running when the package failed (a
		// panic, a timeout) had their say before it.
		for _, top := range slices.Sorted(maps.Keys(p.pending[e.Package])) {
			p.flush(e.Package, top)
		}
		for _, line := range p.lines[e.Package] {
			if e.Action == "fail" || strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "?   \t") {
				io.WriteString(p.w, p.marked(e.Package, line))
			}
		}
	}
	delete(p.pending, e.Package)
	delete(p.lines, e.Package)
}

// marked adds to a package's ok line how many of its tests skipped.
func (p *Printer) marked(pkg, line string) string {
	if n := p.skipped[pkg]; n > 0 && strings.HasPrefix(line, "ok  \t") {
		return fmt.Sprintf("%s\t(%d skipped)\n", strings.TrimSuffix(line, "\n"), n)
	}
	return line
}

// framing is a line of go test -v that only says which test runs.
func framing(line string) bool {
	for _, prefix := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

var location = regexp.MustCompile(`^\S+\.go:\d+: `)

// reason is the last thing a skipped test said before its --- SKIP line,
// without the file and line that the testing package puts in front, and
// with the lines of a message that spans several joined.
func (p *Printer) reason(pkg, test string) string {
	top, _, _ := strings.Cut(test, "/")
	var said []string
	for _, en := range p.pending[pkg][top] {
		line := strings.TrimSpace(en.line)
		if en.test != test || line == "" || framing(en.line) || strings.HasPrefix(line, "--- SKIP") {
			continue
		}
		if location.MatchString(line) || len(said) == 0 {
			said = append(said, location.ReplaceAllString(line, ""))
		} else {
			said[len(said)-1] += " " + line
		}
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return said[len(said)-1]
}
