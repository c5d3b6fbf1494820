// Command runtests runs the tests of every Go module in the repository and
// ends with a summary: modules passed and failed, and every skipped test
// with its reason. scripts/test builds it and runs it; the arguments after
// -- go to go test.
//
// Each module is tested on its own (GOWORK=off), with -race where the race
// detector can run. KEYRATE_RACE=1 makes the race detector required (a run
// without it fails at once, as CI wants); KEYRATE_RACE=0 turns it off.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/keyrate/keyrate/scripts/internal/gotest"
	"github.com/keyrate/keyrate/scripts/internal/release"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runtests", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", ".", "the repository root")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	goArgs := fs.Args()

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
	for _, m := range mods {
		dirs = append(dirs, m.Dir)
	}
	plan := newPlan(dirs, raceOff == "")
	var done []gotest.Tested
	for _, t := range plan {
		fmt.Fprintf(stdout, "== module %s (%s)\n", t.Dir, how(t))
		t.Outcome = gotest.Module(ctx, filepath.Join(*root, filepath.FromSlash(t.Dir)), t.Race, goArgs, stdout)
		done = append(done, t)
	}
	gotest.WriteSummary(stdout, raceOff, done)
	for _, t := range done {
		if !t.OK() {
			return 1
		}
	}
	return 0
}

// newPlan is the modules in dirs to test, with -race if race is set.
func newPlan(dirs []string, race bool) []gotest.Tested {
	var plan []gotest.Tested
	for _, d := range dirs {
		plan = append(plan, gotest.Tested{Dir: d, Race: race})
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

func how(t gotest.Tested) string {
	switch {
	case t.Race:
		return "-race"
	case t.Reason != "":
		return "without -race: " + t.Reason
	}
	return "without -race"
}
