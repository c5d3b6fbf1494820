package gotest

import (
	"fmt"
	"io"
	"path"
	"strings"
	"text/tabwriter"
	"time"
)

// Tested is one module's outcome, named by its directory.
type Tested struct {
	Dir    string
	Race   bool
	Reason string // why the module ran without -race where others had it
	Outcome
}

// WriteSummary writes the end of a whole run: whether the race detector ran
// (loudly when it did not), each module passed or failed with its counts,
// and every skipped test with its reason, grouped by module and reason.
func WriteSummary(w io.Writer, raceOff string, mods []Tested) {
	fmt.Fprintln(w, "\n== summary")
	if raceOff != "" {
		fmt.Fprintf(w, "!! RACE DETECTOR OFF: every module ran without -race: %s.\n", raceOff)
	} else {
		fmt.Fprintln(w, "race detector: on (-race)")
		for _, m := range mods {
			if !m.Race {
				fmt.Fprintf(w, "  except %s: %s\n", m.Dir, m.Reason)
			}
		}
	}

	failed := 0
	for _, m := range mods {
		if !m.OK() {
			failed++
		}
	}
	fmt.Fprintf(w, "modules: %d passed, %d failed\n", len(mods)-failed, failed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range mods {
		verdict := "ok"
		if !m.OK() {
			verdict = "FAIL"
		}
		counts := fmt.Sprintf("%d passed", m.Passed)
		if m.Failed > 0 {
			counts += fmt.Sprintf(", %d failed", m.Failed)
		}
		if m.Skipped > 0 {
			counts += fmt.Sprintf(", %d skipped", m.Skipped)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", verdict, m.Dir, counts, m.Duration.Round(100*time.Millisecond))
	}
	tw.Flush()
	for _, m := range mods {
		for _, why := range m.problems() {
			fmt.Fprintf(w, "  %s: %s\n", m.Dir, why)
		}
	}

	skipped := 0
	for _, m := range mods {
		skipped += len(m.Skips)
	}
	if skipped == 0 {
		fmt.Fprintln(w, "skipped tests: none")
		return
	}
	fmt.Fprintf(w, "skipped tests: %d\n", skipped)
	for _, m := range mods {
		var reasons []string
		tests := map[string][]string{}
		for _, s := range m.Skips {
			if tests[s.Reason] == nil {
				reasons = append(reasons, s.Reason)
			}
			tests[s.Reason] = append(tests[s.Reason], path.Base(s.Package)+"."+s.Test)
		}
		for _, r := range reasons {
			fmt.Fprintf(w, "  %s: %s\n      %s\n", m.Dir, r, strings.Join(tests[r], ", "))
		}
	}
}

// problems says what made a module fail, in a line each.
func (t Tested) problems() []string {
	var out []string
	if t.Untidy != "" {
		out = append(out, "go mod tidy would change go.mod or go.sum")
	}
	if t.Problem != "" {
		out = append(out, t.Problem)
	}
	for _, f := range t.FailedTests {
		out = append(out, "failed: "+path.Base(f))
	}
	for _, p := range t.FailedPackages {
		if !hasTestIn(t.FailedTests, p) {
			out = append(out, "failed: package "+p)
		}
	}
	return out
}

func hasTestIn(tests []string, pkg string) bool {
	for _, t := range tests {
		if strings.HasPrefix(t, pkg+".") {
			return true
		}
	}
	return false
}
