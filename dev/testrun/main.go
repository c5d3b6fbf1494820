// Command testrun runs one command per module, a few at a time, and passes
// on what they print as it comes, so that a long test suite shows its
// progress: dev/test runs it over every module's go test -json, which
// gotestsum reads and prints a line per package from as each finishes.
//
//	testrun [-jobs n] [-first-alone] [-slow d] -- command [arg...] < dirs
//
// It reads directories from standard input, one a line, and runs command
// once for each, with every argument "{}" replaced by the directory: the
// first alone with -first-alone (the root module, which the others build
// on), then up to -jobs at once, in the order given. Each line a command
// writes to standard output is passed on whole, so that the lines of two
// commands never mix; a command's standard error is passed on when it
// ends, in one piece, followed by a line saying how it ended:
//
//	== module redislimit: ok in 41s
//
// testrun reads the go test -json events it passes on, and names once
// every test still running -slow after it started (a minute by default), so
// that a hung test can be told from a slow one long before go test's own
// timeout:
//
//	!! still running after 1m0s: TestOutage (github.com/keyrate/keyrate/redislimit)
//
// It exits 1 when a command failed, 2 on bad usage.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

func main() {
	jobs := flag.Int("jobs", 2, "commands run at once, after the first")
	firstAlone := flag.Bool("first-alone", false, "run the first command alone, before the others")
	slow := flag.Duration("slow", time.Minute, "name each test still running this long after it started")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: testrun [-jobs n] [-first-alone] [-slow d] -- command [arg...] < dirs")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *jobs < 1 || *slow <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	dirs, err := readDirs(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
	o := &output{stdout: os.Stdout, stderr: os.Stderr}
	w := newWatch(*slow)
	stop := w.every(time.Second, o, time.Now)
	ok := schedule(dirs, *jobs, *firstAlone, func(dir string) bool {
		return runOne(dir, flag.Args(), o, w, time.Now)
	})
	stop()
	if !ok {
		os.Exit(1)
	}
}

// readDirs returns the non-empty lines of r.
func readDirs(r io.Reader) ([]string, error) {
	var dirs []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		if d := strings.TrimSpace(s.Text()); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs, s.Err()
}

// schedule calls run for every dir, in order: the first alone when
// firstAlone is set, then up to jobs at once. It reports whether every
// call reported success.
func schedule(dirs []string, jobs int, firstAlone bool, run func(dir string) bool) bool {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ok  = true
		sem = make(chan struct{}, jobs)
	)
	one := func(dir string) {
		if !run(dir) {
			mu.Lock()
			ok = false
			mu.Unlock()
		}
	}
	if firstAlone && len(dirs) > 0 {
		one(dirs[0])
		dirs = dirs[1:]
	}
	for _, dir := range dirs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			one(dir)
		})
	}
	wg.Wait()
	return ok
}

// runOne runs argv for dir (every "{}" in it replaced by dir), passing its
// standard output on line by line as it comes and its standard error when
// it ends, then the line that says how it ended. It reports whether the
// command succeeded.
func runOne(dir string, argv []string, o *output, w *watch, now func() time.Time) bool {
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = strings.ReplaceAll(a, "{}", dir)
	}
	began := now()
	cmd := exec.Command(args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err == nil {
		stream(stdout, o, w, now)
		err = cmd.Wait()
	}
	if err != nil && !errors.As(err, new(*exec.ExitError)) {
		fmt.Fprintf(&stderr, "testrun: %s: %v\n", dir, err)
	}
	result := "ok"
	if err != nil {
		result = "FAIL"
	}
	o.stderrBlock(stderr.Bytes())
	o.line(fmt.Appendf(nil, "== module %s: %s in %ds", dir, result, int(now().Sub(began).Seconds())))
	return err == nil
}

// stream passes on every line of r whole, and tells w of each, until r
// ends. A last line without a newline is passed on with one.
func stream(r io.Reader, o *output, w *watch, now func() time.Time) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte("\n"))
			w.event(line, now())
			o.line(line)
		}
		if err != nil {
			return
		}
	}
}

// output writes whole lines to standard output and whole blocks to
// standard error, one writer at a time.
type output struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
}

// line writes b and a newline to standard output in one write.
func (o *output) line(b []byte) {
	buf := make([]byte, 0, len(b)+1)
	buf = append(append(buf, b...), '\n')
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stdout.Write(buf)
}

// stderrBlock writes b to standard error in one write, ending it with a
// newline if it lacks one.
func (o *output) stderrBlock(b []byte) {
	if len(b) == 0 {
		return
	}
	if b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stderr.Write(b)
}
