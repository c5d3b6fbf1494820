package main

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/keyrate/keyrate/scripts/internal/gotest"
)

func plan(dirs ...string) []gotest.Tested { return newPlan(dirs, true) }

func dirsOf(ts []gotest.Tested) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Dir)
	}
	return out
}

func TestOrder(t *testing.T) {
	got := dirsOf(order(plan(".", "benchmarks", "e2e", "redislimit", "scripts", "zeta")))
	want := []string{".", "e2e", "benchmarks", "redislimit", "zeta", "scripts"}
	if !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
}

// fakeTests stands in for go test: each module's test writes a first line,
// blocks until the module is released, then writes a last line.
type fakeTests struct {
	mu      sync.Mutex
	started []string
	release map[string]chan struct{}
}

func newFakeTests(dirs ...string) *fakeTests {
	f := &fakeTests{release: map[string]chan struct{}{}}
	for _, d := range dirs {
		f.release[d] = make(chan struct{})
	}
	return f
}

func (f *fakeTests) test(m *gotest.Tested, out io.Writer) {
	f.mu.Lock()
	f.started = append(f.started, m.Dir)
	f.mu.Unlock()
	fmt.Fprintf(out, "first line of %s\n", m.Dir)
	<-f.release[m.Dir]
	fmt.Fprintf(out, "last line of %s\n", m.Dir)
	m.Passed = len(m.Dir)
}

func (f *fakeTests) startedSoFar() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.started)
}

// TestScheduleWaits checks, at each point where every worker is blocked,
// which modules have started: beside the root only a module built
// differently, a module only after those it requires, and every module's
// output whole.
func TestScheduleWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dirs := []string{".", "benchmarks", "e2e", "redislimit", "redislimit/bench"}
		requires := map[string][]string{
			"benchmarks":       {"."},
			"redislimit":       {"."},
			"redislimit/bench": {"redislimit", "."},
		}
		f := newFakeTests(dirs...)
		p := order(plan(dirs...))
		var stdout bytes.Buffer
		done := make(chan []gotest.Tested)
		go func() { done <- schedule(p, waits(p, requires), 2, f.test, &stdout) }()

		steps := []struct {
			release string
			started []string
		}{
			{"", []string{".", "e2e"}},
			{"e2e", []string{".", "e2e"}},                                    // the others wait for the root
			{".", []string{".", "e2e", "benchmarks", "redislimit"}},          // two at a time
			{"benchmarks", []string{".", "e2e", "benchmarks", "redislimit"}}, // bench waits for redislimit
			{"redislimit", []string{".", "e2e", "benchmarks", "redislimit", "redislimit/bench"}},
		}
		for _, s := range steps {
			if s.release != "" {
				close(f.release[s.release])
			}
			synctest.Wait()
			// Modules taken together start in either order: compare sets.
			got, want := f.startedSoFar(), slices.Clone(s.started)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("after %q ended, started %q; want %q", s.release, got, s.started)
			}
		}
		close(f.release["redislimit/bench"])
		got := <-done

		if want := []string{".", "e2e", "benchmarks", "redislimit", "redislimit/bench"}; !slices.Equal(dirsOf(got), want) {
			t.Errorf("outcomes for %q, want %q", dirsOf(got), want)
		}
		for _, m := range got {
			if m.Passed != len(m.Dir) {
				t.Errorf("module %s: outcome %+v lost", m.Dir, m.Outcome)
			}
			block := fmt.Sprintf("first line of %s\nlast line of %s\n", m.Dir, m.Dir)
			if !strings.Contains(stdout.String(), block) {
				t.Errorf("output of %s not whole:\n%s", m.Dir, stdout.String())
			}
		}
		if !strings.Contains(stdout.String(), "== module e2e (without -race: "+noRace["e2e"]) {
			t.Errorf("output does not say why e2e runs without -race:\n%s", stdout.String())
		}
	})
}

// TestScheduleSurvivesACycle: modules that wait for each other still run,
// one at a time.
func TestScheduleSurvivesACycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTests(".", "a", "b")
		p := plan(".", "a", "b")
		after := map[string][]string{".": {"b"}, "a": {"."}, "b": {"a"}}
		done := make(chan []gotest.Tested)
		go func() { done <- schedule(p, after, 2, f.test, io.Discard) }()
		for i, d := range []string{".", "a", "b"} {
			synctest.Wait()
			if got := f.startedSoFar(); len(got) != i+1 {
				t.Fatalf("started %q, want one more module at a time", got)
			}
			close(f.release[d])
		}
		if got := dirsOf(<-done); len(got) != 3 {
			t.Errorf("outcomes for %q", got)
		}
	})
}

func TestRaceSettings(t *testing.T) {
	if why, err := raceMode(t.Context(), "0"); err != nil || !strings.Contains(why, "KEYRATE_RACE=0") {
		t.Errorf("KEYRATE_RACE=0: %q, %v", why, err)
	}
	if _, err := raceMode(t.Context(), "yes"); err == nil {
		t.Error("KEYRATE_RACE=yes accepted")
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"-jobs", "0"}, {"-bogus"}} {
		var out, errs bytes.Buffer
		if code := run(t.Context(), args, &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("runtests %q = %d, stderr %q; want 2 with a message", args, code, errs.String())
		}
	}
}

func TestWithoutRaceNoModuleIsSingledOut(t *testing.T) {
	for _, m := range newPlan([]string{".", "e2e"}, false) {
		if m.Race || m.Reason != "" {
			t.Errorf("with the race detector off, module %s: %+v", m.Dir, m)
		}
	}
}
