package gotest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// Outcome is what testing one module found.
type Outcome struct {
	Result
	Untidy   string // what go mod tidy -diff said, when it found work to do
	Problem  string // go test failed with no failed package to show for it
	Duration time.Duration
}

// OK reports whether the module passed.
func (o Outcome) OK() bool {
	return o.Untidy == "" && o.Problem == "" && o.Failed == 0 && len(o.FailedPackages) == 0
}

// Module tests the Go module in dir on its own (GOWORK=off): go mod tidy
// -diff must find nothing to change, then go test runs every package with
// vet's full set of checks (sharing the test build, so nothing is compiled
// twice), a shuffled order, no cached results, and -race when race is set.
// args go to go test before the package pattern. What it prints goes to
// out, as plain go test would print it.
func Module(ctx context.Context, dir string, race bool, args []string, out io.Writer) Outcome {
	start := time.Now()
	out = &lockedWriter{w: out}
	var o Outcome

	tidy := command(ctx, dir, "mod", "tidy", "-diff")
	var diff bytes.Buffer
	tidy.Stdout, tidy.Stderr = &diff, &diff
	if err := tidy.Run(); err != nil {
		o.Untidy = strings.TrimSpace(diff.String())
		if o.Untidy == "" {
			o.Untidy = err.Error()
		}
		fmt.Fprintf(out, "go mod tidy would change go.mod or go.sum (run it in %s):\n%s\n", dir, o.Untidy)
	}

	testArgs := []string{"test", "-json", "-count=1", "-shuffle=on", "-vet=all"}
	if race {
		testArgs = append(testArgs, "-race")
	}
	testArgs = append(testArgs, args...)
	testArgs = append(testArgs, "./...")
	test := command(ctx, dir, testArgs...)
	p := NewPrinter(out, slices.Contains(args, "-v") || slices.Contains(args, "-test.v"))
	test.Stdout, test.Stderr = p, out
	err := test.Run()
	o.Result = p.Result()
	if err != nil && o.Failed == 0 && len(o.FailedPackages) == 0 {
		o.Problem = fmt.Sprintf("go %s: %v", strings.Join(testArgs, " "), err)
		fmt.Fprintln(out, o.Problem)
	}
	o.Duration = time.Since(start)
	return o
}

func command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	return cmd
}

// lockedWriter lets the go command's standard output (through a Printer)
// and its standard error share one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
