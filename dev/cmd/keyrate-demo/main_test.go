package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// TestMain removes the demo binary demoBinary built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// demoBinary builds the real command once per test binary and returns its
// path; the test is skipped without a go command.
func demoBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the demo with")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "keyrate-demo-test"); built.err != nil {
			return
		}
		// The build has go test's own timeout: from a cold cache on two
		// busy cores it can take minutes.
		built.bin = filepath.Join(built.dir, "keyrate-demo")
		if out, err := exec.Command(goTool, "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// TestDemoBinary builds the real command, starts it on a free loopback port
// and drives it with an HTTP client, as a user following the README would.
func TestDemoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo binary")
	}
	bin := demoBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("no output: %v", lines.Err())
	}
	base, ok := strings.CutPrefix(lines.Text(), "keyrate-demo listening on ")
	if !ok {
		t.Fatalf("first line %q does not give the address", lines.Text())
	}
	rest := make(chan string, 1)
	go func() { // keep the pipe drained; hand over everything printed, up to EOF
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 3 {
		if resp := get("/api/status"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"status";q=3;w=60` {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
	resp := get("/api/status")
	retry := resp.Header.Get("Retry-After")
	if resp.StatusCode != 429 || retry == "" || retry == "0" ||
		resp.Header.Get("RateLimit") != `"status";r=0;t=`+retry ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("fourth request: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get("/api/search?q=x"); resp.StatusCode != 200 {
		t.Fatalf("search: %d", resp.StatusCode)
	}
	if resp := get("/api/burst"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"burst";q=10;w=10` {
		t.Fatalf("burst: %d %v", resp.StatusCode, resp.Header)
	}
	metrics, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	if metrics.StatusCode != 200 || !strings.Contains(string(body), `keyrate_requests_total{result="limited",route="status"} 1`) {
		t.Fatalf("GET /metrics: %d\n%s", metrics.StatusCode, body)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// Read to the end before Wait: Wait closes the pipe, and lines still
	// unread would be lost.
	out := <-rest
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo exited with %v", err)
	}
	for _, hint := range []string{
		"/api/status  3 per 60s; 10 per 60s for a key starting with pro-\n",
		"/api/search  20 per 60s\n",
		"/api/burst   10 per 10s\n",
		"/api/export  2 per 10s (export-burst) and 5 per 3600s (export-hourly)\n",
		"/api/report  20 per 60s; 2 in flight\n",
		"/api/burst; done", "/metrics | grep",
	} {
		if !strings.Contains(out, hint) {
			t.Errorf("start-up hints lack %q:\n%s", hint, out)
		}
	}
	if strings.Count(out, " status ") != 4 || strings.Count(out, " burst ") != 1 || strings.Count(out, " refused ") != 1 || !strings.Contains(out, "shutting down") {
		t.Fatalf("log does not show one line per decision:\n%s", out)
	}
}

// Every flag error names its flag: a stray argument, a negative
// -trusted-proxies, and the ranges checked before.
func TestCheckFlags(t *testing.T) {
	const ok, sec = 1024, time.Second
	for _, c := range []struct {
		name     string
		args     []string
		hops     int
		conns    int
		interval time.Duration
		fallback float64
		want     string // "" for no error, else what it starts with
	}{
		{"defaults", nil, 0, ok, sec, 0, ""},
		{"proxies", nil, 2, ok, sec, 0, ""},
		{"a stray argument", []string{"8080"}, 0, ok, sec, 0, `unexpected argument "8080"`},
		{"negative proxies", nil, -1, ok, sec, 0, "-trusted-proxies is -1"},
		{"no interval", nil, 0, ok, 0, 0, "-otel-interval"},
		{"no connections", nil, 0, 0, sec, 0, "-max-conns"},
		{"a fallback without Redis", nil, 0, ok, sec, 0.5, "-redis-fallback"},
	} {
		err := checkFlags(c.args, c.hops, c.conns, ok, c.interval, c.fallback, "")
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want no error", c.name, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error starting %q", c.name, err, c.want)
		}
	}
}

// What stops the demo at start-up is one line of standard error naming
// the flag, with no timestamp and nothing of go-redis's before it: a stray
// argument and a negative -trusted-proxies exit 2, as every flag error
// does; a -redis where nothing answers exits 1.
func TestDemoBinaryStartupErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo binary")
	}
	bin := demoBinary(t)
	closed := closedAddr(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-addr", "127.0.0.1:0", "extra"}, 2, `keyrate-demo: unexpected argument "extra": `},
		{[]string{"-addr", "127.0.0.1:0", "-trusted-proxies", "-1"}, 2, "keyrate-demo: -trusted-proxies is -1, want 0 or more"},
		{[]string{"-addr", "127.0.0.1:0", "-redis", closed}, 1, "keyrate-demo: no Redis at " + closed + ": "},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, c.args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.code {
			t.Errorf("%q: %v, want exit status %d\n%s", c.args, err, c.code, stderr.String())
			continue
		}
		if got := stderr.String(); !strings.HasPrefix(got, c.want) || strings.Count(got, "\n") != 1 || stdout.Len() != 0 {
			t.Errorf("%q printed\n%s%s\nwant one line on standard error starting %q", c.args, stdout.String(), got, c.want)
		}
	}
}
