// Command runtests runs the tests of every Go module in the repository and
// ends with a summary: modules passed and failed, and every skipped test
// with its reason. scripts/test builds it and runs it; the arguments after
// -- go to go test.
//
// Each module is tested on its own (GOWORK=off), with -race where the race
// detector can run. KEYRATE_RACE=1 makes the race detector required (a run
// without it fails at once, as CI wants); KEYRATE_RACE=0 turns it off.
//
// Modules run two at a time on a machine with two cores or more, so that
// one module's downloads, links and waits overlap another's compiling. The
// root module goes first; a module waits for the modules it requires and,
// when it is built the same way, for the root (see waits), so that the
// standard library and those modules are built once, not by two go
// commands at the same time.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/keyrate/keyrate/scripts/internal/gotest"
	"github.com/keyrate/keyrate/scripts/internal/release"
)

// noRace lists the modules tested without -race, and why.
var noRace = map[string]string{
	"e2e": "it only drives programs (Chromium, the demo, keyrate-load); the demo is raced in its own module",
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtests", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", ".", "the repository root")
	jobs := fs.Int("jobs", min(2, runtime.NumCPU()), "how many modules to test at once")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	goArgs := fs.Args()
	if *jobs < 1 {
		fmt.Fprintf(stderr, "runtests: -jobs is %d, want at least 1\n", *jobs)
		return 2
	}

	raceOff, err := raceMode(ctx, os.Getenv("KEYRATE_RACE"))
	if err != nil {
		fmt.Fprintln(stderr, "runtests:", err)
		return 1
	}
	if raceOff != "" {
		fmt.Fprintf(stdout, "!! RACE DETECTOR OFF: the tests run without -race: %s.\n\n", raceOff)
	}
	mods, err := release.All(*root)
	if err != nil {
		fmt.Fprintln(stderr, "runtests:", err)
		return 1
	}

	var dirs []string
	requires := map[string][]string{}
	byPath := map[string]string{}
	for _, m := range mods {
		dirs = append(dirs, m.Dir)
		byPath[m.Path] = m.Dir
	}
	for _, m := range mods {
		for _, r := range m.File.Require {
			if dir, ok := byPath[r.Mod.Path]; ok {
				requires[m.Dir] = append(requires[m.Dir], dir)
			}
		}
	}
	plan := newPlan(dirs, raceOff == "")
	test := func(t *gotest.Tested, out io.Writer) {
		t.Outcome = gotest.Module(ctx, filepath.Join(*root, filepath.FromSlash(t.Dir)), t.Race, goArgs, out)
	}
	done := schedule(order(plan), waits(plan, requires), *jobs, test, stdout)
	// The summary lists the modules in their own order, not the schedule's.
	slices.SortFunc(done, func(a, b gotest.Tested) int {
		return slices.IndexFunc(plan, func(t gotest.Tested) bool { return t.Dir == a.Dir }) -
			slices.IndexFunc(plan, func(t gotest.Tested) bool { return t.Dir == b.Dir })
	})
	gotest.WriteSummary(stdout, raceOff, done)
	for _, t := range done {
		if !t.OK() {
			return 1
		}
	}
	return 0
}

// newPlan is the modules in dirs to test, with -race if race is set and
// the module is not listed in noRace.
func newPlan(dirs []string, race bool) []gotest.Tested {
	var plan []gotest.Tested
	for _, d := range dirs {
		t := gotest.Tested{Dir: d, Race: race}
		if why, ok := noRace[d]; ok && race {
			t.Race, t.Reason = false, why
		}
		plan = append(plan, t)
	}
	return plan
}

// raceMode reads KEYRATE_RACE and says why the race detector is off, or ""
// when it is on.
func raceMode(ctx context.Context, setting string) (string, error) {
	switch setting {
	case "0":
		return "KEYRATE_RACE=0 turned it off", nil
	case "", "1":
	default:
		return "", fmt.Errorf("KEYRATE_RACE is %q, want 1 (required), 0 (off) or unset (when it can run)", setting)
	}
	ok, why, err := gotest.Race(ctx)
	switch {
	case err != nil:
		return "", err
	case !ok && setting == "1":
		return "", fmt.Errorf("KEYRATE_RACE=1 requires the race detector, which cannot run here: %s", why)
	case !ok:
		return why, nil
	}
	return "", nil
}

// order puts the root module first, then the modules built differently from
// it, which need not wait for it, then the rest; the tooling modules go
// last, since they check the install from a module cache the others fill.
func order(plan []gotest.Tested) []gotest.Tested {
	rank := func(t gotest.Tested) int {
		switch {
		case t.Dir == ".":
			return 0
		case t.Race != plan[0].Race:
			return 1
		case slices.Contains(release.Tooling, t.Dir):
			return 3
		}
		return 2
	}
	out := slices.Clone(plan)
	slices.SortStableFunc(out, func(a, b gotest.Tested) int { return rank(a) - rank(b) })
	return out
}

// waits says which modules each module of plan waits for: the modules of
// the repository it requires, whose dependencies it shares, and the root
// module if it is built the same way, since they all need the standard
// library built that way. Each shared build then happens once instead of in
// two go commands at the same time.
func waits(plan []gotest.Tested, requires map[string][]string) map[string][]string {
	after := map[string][]string{}
	for _, t := range plan {
		after[t.Dir] = slices.Clone(requires[t.Dir])
		if t.Dir != "." && t.Race == plan[0].Race && !slices.Contains(after[t.Dir], ".") {
			after[t.Dir] = append(after[t.Dir], ".")
		}
	}
	return after
}

// schedule tests the modules of plan with test, jobs at a time, in order,
// except that a module starts only after those it waits for are done (or
// when nothing else can run, should they wait for each other). Each
// module's output is written whole when it ends, so that modules never
// interleave.
func schedule(plan []gotest.Tested, after map[string][]string, jobs int, test func(*gotest.Tested, io.Writer), stdout io.Writer) []gotest.Tested {
	var (
		mu      sync.Mutex
		changed = sync.NewCond(&mu)
		taken   = make([]bool, len(plan))
		done    = map[string]bool{}
		running = 0
		wg      sync.WaitGroup
	)
	ready := func(dir string) bool {
		for _, d := range after[dir] {
			if !done[d] {
				return false
			}
		}
		return true
	}
	take := func() int {
		mu.Lock()
		defer mu.Unlock()
		for {
			// Only Dir is read here: a worker may be writing another
			// module's Outcome.
			first := -1
			for i := range plan {
				if taken[i] {
					continue
				}
				if first < 0 {
					first = i
				}
				if ready(plan[i].Dir) {
					first = i
					break
				}
			}
			switch {
			case first < 0:
				return -1
			case ready(plan[first].Dir) || running == 0:
				taken[first] = true
				running++
				return first
			}
			changed.Wait()
		}
	}
	for range jobs {
		wg.Go(func() {
			for i := take(); i >= 0; i = take() {
				t := &plan[i]
				mu.Lock()
				fmt.Fprintf(stdout, "-- %s: started (%s)\n", t.Dir, how(*t))
				mu.Unlock()
				var out bytes.Buffer
				test(t, &out)
				mu.Lock()
				fmt.Fprintf(stdout, "== module %s (%s, %s)\n%s", t.Dir, how(*t), t.Duration.Round(100*time.Millisecond), out.Bytes())
				done[t.Dir] = true
				running--
				changed.Broadcast()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return plan
}

func how(t gotest.Tested) string {
	switch {
	case t.Race:
		return "-race"
	case t.Reason != "":
		return "without -race: " + t.Reason
	}
	return "without -race"
}
