package gotest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestModuleReadsWhatGoTestSays runs the real go test on a fixture module
// with passing, failing, skipped and vetted packages.
func TestModuleReadsWhatGoTestSays(t *testing.T) {
	var out bytes.Buffer
	o := Module(t.Context(), "testdata/fixture", false, nil, &out)
	text := out.String()
	t.Log("\n" + text)

	if o.OK() || o.Untidy != "" || o.Problem != "" {
		t.Errorf("outcome %+v: want a failure from its tests alone", o)
	}
	// Passed: TestQuiet, TestTable, TestTable/runs, TestParent/passes,
	// TestPasses. Failed: TestFails, TestParent, TestParent/fails.
	// Skipped: TestSkipped, TestTable/skips.
	if o.Passed != 5 || o.Failed != 3 || o.Skipped != 2 {
		t.Errorf("counted %d passed, %d failed, %d skipped; want 5, 3, 2", o.Passed, o.Failed, o.Skipped)
	}
	slices.Sort(o.FailedTests) // the order is shuffled
	wantFailed := []string{"example.com/fixture/fail.TestFails", "example.com/fixture/fail.TestParent"}
	if !slices.Equal(o.FailedTests, wantFailed) {
		t.Errorf("failed tests %q, want %q", o.FailedTests, wantFailed)
	}
	slices.Sort(o.FailedPackages)
	if want := []string{"example.com/fixture/fail", "example.com/fixture/vet"}; !slices.Equal(o.FailedPackages, want) {
		t.Errorf("failed packages %q, want %q", o.FailedPackages, want)
	}
	wantSkips := []Skip{
		{"example.com/fixture/pass", "TestSkipped", "redis-server not found; install it with: apt-get install -y redis-server"},
		{"example.com/fixture/pass", "TestTable/skips", "needs chromium: its install hint"},
	}
	slices.SortFunc(o.Skips, func(a, b Skip) int { return strings.Compare(a.Test, b.Test) })
	if !slices.Equal(o.Skips, wantSkips) {
		t.Errorf("skips %q, want %q", o.Skips, wantSkips)
	}

	for _, want := range []string{
		"ok  \texample.com/fixture/pass\t",
		"\t(2 skipped)\n",
		"?   \texample.com/fixture/none\t[no test files]\n",
		"fail_test.go:6: context for the failure\n",
		"fail_test.go:7: boom\n",
		"--- FAIL: TestFails",
		"--- FAIL: TestParent/fails",
		"subtest failed",
		"FAIL\texample.com/fixture/fail\t",
		"format %d has arg \"not a number\" of wrong type string",
		"FAIL\texample.com/fixture/vet [build failed]",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, quiet := range []string{"stays quiet", "=== RUN", "--- PASS", "said before skipping", "\nPASS\n"} {
		if strings.Contains(text, quiet) {
			t.Errorf("output has %q, which plain go test does not print", quiet)
		}
	}
}

func TestModuleFailsWhenGoModIsUntidy(t *testing.T) {
	var out bytes.Buffer
	o := Module(t.Context(), "testdata/untidy", false, nil, &out)
	if o.OK() || !strings.Contains(o.Untidy, "-require golang.org/x/mod v0.43.0") {
		t.Errorf("outcome %+v, want go mod tidy's diff", o)
	}
	if !strings.Contains(out.String(), "go mod tidy would change go.mod or go.sum") {
		t.Errorf("output does not say go.mod is untidy:\n%s", out.String())
	}
}

func TestModuleFailsWhenGoTestCannotRun(t *testing.T) {
	var out bytes.Buffer
	o := Module(t.Context(), "testdata/fixture", false, []string{"-count=many"}, &out)
	if o.OK() || !strings.Contains(o.Problem, "exit status") {
		t.Errorf("outcome %+v, want the go command's failure", o)
	}
	if !strings.Contains(out.String(), "-count=many") {
		t.Errorf("output lacks the go command's complaint:\n%s", out.String())
	}
}

// stream is go test -json output for the events given as action, package,
// test, output.
func stream(events ...[4]string) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, `{"Action":%q,"Package":%q,"Test":%q,"Output":%q}`+"\n", e[0], e[1], e[2], e[3])
	}
	return b.String()
}

func TestPrinterVerboseShowsEverythingAndStillCounts(t *testing.T) {
	in := stream(
		[4]string{"output", "p", "TestA", "=== RUN   TestA\n"},
		[4]string{"output", "p", "TestA", "    a_test.go:3: hello\n"},
		[4]string{"output", "p", "TestA", "--- PASS: TestA (0.00s)\n"},
		[4]string{"pass", "p", "TestA", ""},
		[4]string{"output", "p", "TestB", "=== RUN   TestB\n"},
		[4]string{"output", "p", "TestB", "    b_test.go:9: no redis\n"},
		[4]string{"output", "p", "TestB", "--- SKIP: TestB (0.00s)\n"},
		[4]string{"skip", "p", "TestB", ""},
		[4]string{"output", "p", "", "PASS\n"},
		[4]string{"output", "p", "", "ok  \tp\t0.1s\n"},
		[4]string{"pass", "p", "", ""},
	)
	var out bytes.Buffer
	p := NewPrinter(&out, true)
	// Written in pieces that split lines, as a pipe may deliver them.
	for chunk := range slices.Chunk([]byte(in), 7) {
		p.Write(chunk)
	}
	r := p.Result()
	want := "=== RUN   TestA\n    a_test.go:3: hello\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n    b_test.go:9: no redis\n--- SKIP: TestB (0.00s)\nPASS\nok  \tp\t0.1s\t(1 skipped)\n"
	if out.String() != want {
		t.Errorf("verbose output\n%q\nwant\n%q", out.String(), want)
	}
	if r.Passed != 1 || r.Skipped != 1 || r.Skips[0].Reason != "no redis" {
		t.Errorf("result %+v", r)
	}
}

func TestPrinterShowsTestsStillRunningWhenAPackageFails(t *testing.T) {
	in := stream(
		[4]string{"output", "p", "TestHangs", "=== RUN   TestHangs\n"},
		[4]string{"output", "p", "TestHangs", "    h_test.go:5: waiting\n"},
		[4]string{"output", "p", "", "panic: test timed out after 10m0s\n"},
		[4]string{"output", "p", "", "FAIL\tp\t600.0s\n"},
		[4]string{"fail", "p", "", ""},
	) + "a line that is not JSON\n"
	var out bytes.Buffer
	p := NewPrinter(&out, false)
	p.Write([]byte(in))
	r := p.Result()
	want := "    h_test.go:5: waiting\npanic: test timed out after 10m0s\nFAIL\tp\t600.0s\na line that is not JSON\n"
	if out.String() != want {
		t.Errorf("output\n%q\nwant\n%q", out.String(), want)
	}
	if !slices.Equal(r.FailedPackages, []string{"p"}) {
		t.Errorf("failed packages %q", r.FailedPackages)
	}
}

func TestRaceNeedsACompilerAndCgo(t *testing.T) {
	found := func(string) (string, error) { return "/usr/bin/gcc", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	cases := []struct {
		cgo, cc  string
		lookPath func(string) (string, error)
		ok       bool
		why      string
	}{
		{"1", "gcc", found, true, ""},
		{"1", "clang -fno-strict", found, true, ""},
		{"0", "gcc", missing, false, "no C compiler: gcc not found"},
		{"1", "", missing, false, "no C compiler: gcc not found"},
		{"0", "gcc", found, false, "cgo is off (CGO_ENABLED=0)"},
	}
	for _, c := range cases {
		ok, why := raceFrom(c.cgo, c.cc, c.lookPath)
		if ok != c.ok || !strings.HasPrefix(why, c.why) {
			t.Errorf("raceFrom(%q, %q) = %v, %q; want %v, %q...", c.cgo, c.cc, ok, why, c.ok, c.why)
		}
	}
}

func TestSummary(t *testing.T) {
	mods := []Tested{
		{Dir: ".", Race: true, Outcome: Outcome{Result: Result{Passed: 10}, Duration: 3 * time.Second}},
		{Dir: "redislimit", Race: true, Outcome: Outcome{
			Result: Result{Passed: 2, Skipped: 3, Skips: []Skip{
				{"example.com/r", "TestA", "no redis-server"},
				{"example.com/r", "TestB", "no redis-cli"},
				{"example.com/r", "TestC", "no redis-server"},
			}},
			Duration: 1500 * time.Millisecond,
		}},
		{Dir: "e2e", Reason: "it drives Chromium", Outcome: Outcome{
			Result: Result{Failed: 1, FailedTests: []string{"example.com/e2e.TestPage"}, FailedPackages: []string{"example.com/e2e", "example.com/e2e/other"}},
			Untidy: "diff",
		}},
	}
	var out bytes.Buffer
	WriteSummary(&out, "", mods)
	for _, want := range []string{
		"race detector: on (-race)\n  except e2e: it drives Chromium\n",
		"modules: 2 passed, 1 failed\n",
		"  ok    .           10 passed",
		"  ok    redislimit  2 passed, 3 skipped  1.5s\n",
		"  FAIL  e2e         0 passed, 1 failed",
		"  e2e: go mod tidy would change go.mod or go.sum\n  e2e: failed: e2e.TestPage\n  e2e: failed: package example.com/e2e/other\n",
		"skipped tests: 3\n  redislimit: no redis-server\n      r.TestA, r.TestC\n  redislimit: no redis-cli\n      r.TestB\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	WriteSummary(&out, "no C compiler", mods[:1])
	for _, want := range []string{"!! RACE DETECTOR OFF: every module ran without -race: no C compiler.", "skipped tests: none"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
