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
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// The tests in this file build the command and drive the binary over
// loopback with a gRPC client of go-control-plane's types, as Envoy would.
// It decides on the real clock: each test either leaves its timing ample
// slack or checks the time its calls took and says so when a slow machine
// took too long to tell.

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if code == 0 {
		// Every limiter's janitor and every reloader stopped with its test.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left running:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// builtBinary builds the command once per test run and returns its path.
func builtBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the keyrate-rls binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build keyrate-rls with")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "keyrate-rls-test"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "keyrate-rls")
		out, err := exec.Command(goTool, "build", "-o", built.bin, ".").CombinedOutput()
		if err != nil {
			built.err = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// cleanEnv returns the test's environment without the variables
// keyrate-rls reads (settings.go), so that the tests start it from what
// they set alone.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !peerVariable.MatchString(name) {
			env = append(env, kv)
		}
	}
	return env
}

// peerVariable matches the names of envoyproxy/ratelimit's settings.
var peerVariable = regexp.MustCompile(`^(HOST|PORT|GRPC_.*|DEBUG_.*|LOG_.*|USE_.*|STATSD_.*|PROMETHEUS_.*|RUNTIME_.*|CONFIG_.*|REDIS_.*|MEMCACHE_.*|BACKEND_TYPE|CACHE_KEY_PREFIX|LOCAL_CACHE_SIZE_IN_BYTES|NEAR_LIMIT_RATIO|EXPIRATION_JITTER_MAX_SECONDS|STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT|LIMIT_.*|HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED|SHADOW_MODE|QUOTA_MODE|RESPONSE_DYNAMIC_METADATA|MERGE_DOMAIN_CONFIG|TRACING_.*|EXTRA_TAGS|DISABLE_STATS|STATS_FLUSH_INTERVAL|FORCE_START_WITHOUT_INITIAL_CONFIG)$`)

// server is a running keyrate-rls.
type server struct {
	cmd      *exec.Cmd
	config   string // the configuration file's path
	grpcAddr string
	httpBase string
	client   rlspb.RateLimitServiceClient
	conn     *grpc.ClientConn
	log      *lines
	exited   chan struct{}
	exitErr  error
}

// startServer writes config to a file and starts the binary on it, on free
// loopback ports, reading the file again only on SIGHUP, with more flags
// from args.
func startServer(t *testing.T, config string, args ...string) *server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write(t, path, config)
	s := startBinary(t, nil, append([]string{"-config", path, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-reload-interval", "0"}, args...)...)
	s.config = path
	return s
}

// startBinary starts the binary with env added to the test's environment
// and args, and waits for the line that gives its addresses.
func startBinary(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	return startBinaryUnder(t, nil, env, args...)
}

// startBinaryUnder is startBinary with the binary run by the command
// under (a shell that sets its limits, say), which gets the binary's path
// and args after its own.
func startBinaryUnder(t *testing.T, under, env []string, args ...string) *server {
	t.Helper()
	s := &server{log: &lines{}, exited: make(chan struct{})}
	if len(under) > 0 {
		s.cmd = exec.Command(under[0], append(append(under[1:], builtBinary(t)), args...)...)
	} else {
		s.cmd = exec.Command(builtBinary(t), args...)
	}
	s.cmd.Env = append(cleanEnv(), env...)
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go s.log.read(stderr)
	out := bufio.NewScanner(stdout)
	if !out.Scan() {
		s.cmd.Wait()
		t.Fatalf("no address on stdout; stderr:\n%s", s.log)
	}
	m := regexp.MustCompile(`^keyrate-rls serving gRPC on (\S+) and HTTP on (\S+)$`).FindStringSubmatch(out.Text())
	if m == nil {
		s.cmd.Process.Kill()
		t.Fatalf("first line %q does not give the addresses", out.Text())
	}
	go func() {
		io.Copy(io.Discard, stdout)
		s.exitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.exited
	})
	s.grpcAddr, s.httpBase = m[1], "http://"+m[2]
	if s.conn, err = grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	s.client = rlspb.NewRateLimitServiceClient(s.conn)
	return s
}

// ask calls ShouldRateLimit and summarises the answer without its
// durations, which follow the real clock (see timeless).
func (s *server) ask(t *testing.T, req *rlspb.RateLimitRequest) string {
	t.Helper()
	resp := s.call(t, req)
	return timeless(summary(resp))
}

func (s *server) call(t *testing.T, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// timeless drops the t=... of a summary.
func timeless(s string) string { return regexp.MustCompile(` t=\S+`).ReplaceAllString(s, "") }

// signal sends sig to the server.
func (s *server) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// lines collects a process's output lines, and lets a test wait for one.
type lines struct {
	mu      sync.Mutex
	text    strings.Builder
	changed chan struct{}
}

func (l *lines) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l.mu.Lock()
		l.text.WriteString(sc.Text() + "\n")
		if l.changed != nil {
			close(l.changed)
			l.changed = nil
		}
		l.mu.Unlock()
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// waitFor waits until the output holds substr n times, or fails the test
// after a generous time.
func (l *lines) waitFor(t *testing.T, substr string, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		l.mu.Lock()
		if strings.Count(l.text.String(), substr) >= n {
			l.mu.Unlock()
			return
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("waited for %q in the output:\n%s", substr, l)
		}
	}
}

// binaryConfig holds several of envoyproxy/ratelimit's documented examples,
// one domain each, and a domain of keyrate's own. Windows of a minute or
// more leave the tests that count hits ample time.
func binaryConfig(t *testing.T) string {
	var docs []string
	for _, f := range []string{"messaging.yaml", "example4.yaml", "internal.yaml", "example6.yaml", "extensions.yaml"} {
		docs = append(docs, fixture(t, f))
	}
	return strings.Join(append(docs, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: per_second
    rate_limit: {unit: second, requests_per_unit: 2}
`), "\n---\n")
}

func TestBinaryDecisions(t *testing.T) { stores(t, testBinaryDecisions) }

func testBinaryDecisions(t *testing.T, args ...string) {
	s := startServer(t, binaryConfig(t), args...)
	marketing := func(number string) *rlspb.RateLimitRequest {
		return request("messaging", desc("message_type", "marketing", "to_number", number), desc("to_number", number))
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"per-value budgets", []step{
			{0, marketing("2061111111"), "OK | OK 4/5 DAY | OK 99/100 DAY"},
			{0, marketing("2061111111"), "OK | OK 3/5 DAY | OK 98/100 DAY"},
			{0, marketing("2061111111"), "OK | OK 2/5 DAY | OK 97/100 DAY"},
			{0, marketing("2061111111"), "OK | OK 1/5 DAY | OK 96/100 DAY"},
			{0, marketing("2061111111"), "OK | OK 0/5 DAY | OK 95/100 DAY"},
			{0, marketing("2061111111"), "OVER_LIMIT | OVER_LIMIT 0/5 DAY | OK 95/100 DAY"},
			{0, marketing("2062222222"), "OK | OK 4/5 DAY | OK 99/100 DAY"},
		}},
		{"nested", []step{
			{0, request("example4", desc("key", "value", "subkey", "s")), "OK | OK 299/300 SECOND"},
			{0, request("example4", desc("key", "value")), "OK | OK"},
		}},
		{"no match", []step{
			{0, request("example4", desc("unknown", "x")), "OK | OK"},
			{0, request("nowhere", desc("key", "value", "subkey", "s")), "OK | OK"},
		}},
		{"unlimited", []step{
			{0, request("internal", desc("ldap", "x"), desc("azure", "x")), "OK | OK r=4294967295 | OK 99/100 MINUTE"},
		}},
		{"shadow", []step{
			{0, request("example6", desc("service", "s", "user", "user-a")), "OK | OK 9/10 SECOND"},
		}},
		{"several limits", []step{
			{0, request("api", desc("api_key", "k1")), "OK | OK 9/10 SECOND burst"},
		}},
		{"all or nothing", []step{
			{0, request("d", desc("a", "x"), desc("b", "y")), "OK | OK 0/1 HOUR | OK 4/5 HOUR"},
			{0, request("d", desc("a", "x"), desc("b", "y")), "OVER_LIMIT | OVER_LIMIT 0/1 HOUR | OK 4/5 HOUR"},
			{0, request("d", desc("b", "y")), "OK | OK 3/5 HOUR"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i, st := range c.steps {
				if got := s.ask(t, st.req); got != st.want {
					t.Errorf("call %d:\n got %s\nwant %s", i, got, st.want)
				}
			}
		})
	}

	t.Run("hits_addend", func(t *testing.T) {
		for i, c := range []struct {
			hits uint32
			want string
		}{
			{3, "OK | OK 2/5 HOUR"},
			{3, "OVER_LIMIT | OVER_LIMIT 2/5 HOUR"},
			{0, "OK | OK 1/5 HOUR"},
		} {
			r := request("d", desc("b", "hits"))
			r.HitsAddend = c.hits
			if got := s.ask(t, r); got != c.want {
				t.Errorf("call %d, hits_addend %d:\n got %s\nwant %s", i, c.hits, got, c.want)
			}
		}
	})

	t.Run("duration_until_reset", func(t *testing.T) {
		resp := s.call(t, request("d", desc("b", "reset")))
		if d := resp.Statuses[0].GetDurationUntilReset(); d.GetSeconds() != 3600 || d.GetNanos() != 0 {
			t.Errorf("duration_until_reset of a fresh budget of 5 an hour = %v, want 3600 whole seconds", d)
		}
	})
}

// Two per second: a third call half a second after the first two is
// refused, though a whole second of the wall clock began between them.
func TestBinarySlidingAcrossSecond(t *testing.T) { stores(t, testBinarySlidingAcrossSecond) }

func testBinarySlidingAcrossSecond(t *testing.T, args ...string) {
	s := startServer(t, binaryConfig(t), args...)
	for attempt := range 3 {
		// Make the first two calls 300ms before a whole second (or later
		// in the second), the third 500ms later, in the next second.
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(700 * time.Millisecond).Sub(now))
		r := request("d", desc("per_second", "attempt"+string(rune('0'+attempt))))
		first := time.Now()
		a := s.ask(t, r)
		firstDone := time.Now()
		b := s.ask(t, r)
		time.Sleep(time.Until(first.Add(500 * time.Millisecond)))
		sent := time.Now()
		c := s.call(t, r)
		took := time.Since(first)
		if a != "OK | OK 1/2 SECOND" || b != "OK | OK 0/2 SECOND" {
			t.Fatalf("the first two calls: %s, %s", a, b)
		}
		if took >= time.Second || first.Unix() == sent.Unix() {
			t.Logf("attempt %d: the three calls took %v, from %v to %v: too slow to tell, trying again",
				attempt, took, first.Format(".000"), sent.Format(".000"))
			continue
		}
		if got := timeless(summary(c)); got != "OVER_LIMIT | OVER_LIMIT 0/2 SECOND" {
			t.Fatalf("the third call, %v after the first, across a whole second: %s", sent.Sub(first), got)
		}
		// The first call leaves the window within the second: whole
		// seconds, rounded up, make that 1.
		if wait := c.Statuses[0].GetDurationUntilReset(); wait.GetSeconds() != 1 || wait.GetNanos() != 0 {
			t.Fatalf("duration_until_reset %v, want 1s: the first call leaves the window within a second", wait)
		}
		// The first call was decided by firstDone: it has left the window a
		// second later.
		time.Sleep(time.Until(firstDone.Add(time.Second)))
		if got := s.ask(t, r); got != "OK | OK 0/2 SECOND" && got != "OK | OK 1/2 SECOND" {
			t.Errorf("a call once the first has left the window: %s", got)
		}
		return
	}
	t.Skip("this machine was too slow to make three calls within a second, three times")
}

// window: 3s: two calls in any three seconds.
func TestBinaryWindow(t *testing.T) { stores(t, testBinaryWindow) }

func testBinaryWindow(t *testing.T, args ...string) {
	s := startServer(t, binaryConfig(t), args...)
	r := request("api", desc("client", "c1"))
	start := time.Now()
	for i, want := range []string{"OK | OK 1/2 3xSECOND", "OK | OK 0/2 3xSECOND", "OVER_LIMIT | OVER_LIMIT 0/2 3xSECOND"} {
		if got := s.ask(t, r); got != want {
			t.Fatalf("call %d:\n got %s\nwant %s", i, got, want)
		}
	}
	resp := s.call(t, r)
	wait := resp.Statuses[0].GetDurationUntilReset().AsDuration()
	// The first call was decided after start, this one before now: the
	// first leaves the window at least 3s - (now - start) from now.
	if elapsed := time.Since(start); wait <= 0 || wait > 3*time.Second+time.Millisecond || wait < 3*time.Second-elapsed {
		t.Fatalf("duration_until_reset %v, %v after the first call", wait, time.Since(start))
	}
	time.Sleep(wait)
	// The second call may have left the window too, by the time this one
	// is decided.
	if got := timeless(summary(s.call(t, r))); got != "OK | OK 0/2 3xSECOND" && got != "OK | OK 1/2 3xSECOND" {
		t.Errorf("once the first call has left the window: %s", got)
	}
}

// A reload on SIGHUP keeps the counts; an invalid file is logged with its
// line and changes nothing.
func TestBinaryReloadKeepsCounts(t *testing.T) {
	perHour := func(n string) string { return strings.Replace(perMinute(n), "unit: minute", "unit: hour", 1) }
	s := startServer(t, perHour("3"))
	r := request("d", desc("k", "x"))
	s.ask(t, r)
	if got := s.ask(t, r); got != "OK | OK 1/3 HOUR" {
		t.Fatalf("before the reload: %s", got)
	}
	write(t, s.config, perHour("5"))
	s.signal(t, syscall.SIGHUP)
	s.log.waitFor(t, "configuration reloaded", 1)
	if got := s.ask(t, r); got != "OK | OK 2/5 HOUR" {
		t.Errorf("after the reload: %s", got)
	}
	write(t, s.config, perHour("5")+"  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 9}\n")
	s.signal(t, syscall.SIGHUP)
	s.log.waitFor(t, "invalid configuration", 1)
	if !strings.Contains(s.log.String(), "rules.yaml:8: descriptor: key \\\"k\\\" with the same value is given twice") {
		t.Errorf("the log does not name the line:\n%s", s.log)
	}
	if got := s.ask(t, r); got != "OK | OK 1/5 HOUR" {
		t.Errorf("after an invalid file: %s", got)
	}
}

// A file that cannot be read at start stops the service; so does a
// runtime directory that does not exist, without -config.
func TestBinaryBadConfig(t *testing.T) {
	bin := builtBinary(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write(t, path, "domain: d\n")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-config", filepath.Join(t.TempDir(), "missing.yaml")}, 1, "no such file"},
		{nil, 1, "no rules: the runtime directory " + missing + "/config does not exist"},
		{[]string{"-config", path, "-log-level", "loud"}, 2, "-log-level"},
	} {
		cmd := exec.Command(bin, append(c.args, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")...)
		cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+missing)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("keyrate-rls %s: %v\n%s\nwant exit status %d and %q", strings.Join(c.args, " "), err, out, c.code, c.want)
		}
	}
}

// An invalid rules file at start is as envoyproxy/ratelimit takes it: the
// service starts, logs the error with its line, counts it, and answers
// every call UNAVAILABLE (Envoy's failure_mode_deny then decides) until
// valid rules load, which they do once the file is fixed.
func TestBinaryInvalidConfigAtStart(t *testing.T) {
	s := startServer(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n")
	s.log.waitFor(t, `rules.yaml:5: rate_limit: unit \"fortnight\"`, 1)
	if !strings.Contains(s.log.String(), "invalid configuration; no rules loaded") {
		t.Errorf("the log:\n%s", s.log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.client.ShouldRateLimit(ctx, request("d", desc("k", "v"))); status.Code(err) != codes.Unavailable {
		t.Errorf("a call with no rules loaded: %v, want UNAVAILABLE", err)
	}
	if e, ok := s.metric(t, "ratelimit_service_config_load_error"), s.metric(t, "ratelimit_service_config_load_success"); e != 1 || ok != 0 {
		t.Errorf("config_load_error %d, config_load_success %d; want 1 and 0", e, ok)
	}

	write(t, s.config, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	s.signal(t, syscall.SIGHUP)
	s.log.waitFor(t, "configuration reloaded", 1)
	if got := s.ask(t, request("d", desc("k", "v"))); got != "OK | OK 0/1 HOUR" {
		t.Errorf("after the fix: %s", got)
	}
}

// Health over HTTP and gRPC, /json, /metrics, and a graceful exit on
// SIGTERM.
func TestBinaryHealthJSONMetrics(t *testing.T) {
	s := startServer(t, binaryConfig(t))
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(s.httpBase + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthcheck"); code != 200 || body != "OK\n" {
		t.Errorf("GET /healthcheck: %d %q", code, body)
	}
	hc, err := healthpb.NewHealthClient(s.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v, %v", hc, err)
	}

	post := func() (int, string) {
		t.Helper()
		resp, err := client.Post(s.httpBase+"/json", "application/json",
			strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"json"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := post(); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("POST /json: %d %s", code, body)
	}
	if code, body := post(); code != 429 || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("POST /json over the limit: %d %s", code, body)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="d",rule="a"} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="d",rule="a"} 1`,
		`keyrate_requests_total{result="limited",route="d"} 1`,
		`keyrate_rls_config_loads_total{result="success"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("GET /metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, "json") {
		t.Error("GET /metrics shows a descriptor value")
	}

	s.signal(t, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit 20s after SIGTERM")
	}
	if s.exitErr != nil || !strings.Contains(s.log.String(), "shutting down") {
		t.Errorf("exit after SIGTERM: %v\n%s", s.exitErr, s.log)
	}
}

// During -drain-delay after SIGTERM, /healthcheck answers 503 and the gRPC
// health service NOT_SERVING, while calls are still decided.
func TestBinaryDrain(t *testing.T) {
	s := startServer(t, binaryConfig(t), "-drain-delay", "5s") // ample for the checks below on a slow machine
	s.signal(t, syscall.SIGTERM)
	s.log.waitFor(t, "draining", 1)
	resp, err := http.Get(s.httpBase + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /healthcheck while draining: %d, want 503", resp.StatusCode)
	}
	hc, err := healthpb.NewHealthClient(s.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while draining: %v, %v", hc, err)
	}
	if got := s.ask(t, request("d", desc("b", "drain"))); got != "OK | OK 4/5 HOUR" {
		t.Errorf("a call while draining: %s", got)
	}
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit 20s after SIGTERM")
	}
	if s.exitErr != nil {
		t.Errorf("exit: %v\n%s", s.exitErr, s.log)
	}
}

// gRPC server reflection lists the services, as grpcurl list shows them,
// and /metrics serves envoyproxy/ratelimit's service-level series beside
// the per-rule ones.
func TestBinaryReflectionAndServiceMetrics(t *testing.T) {
	s := startServer(t, binaryConfig(t))
	stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		services = append(services, svc.GetName())
	}
	stream.CloseSend()
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %q, want %s among them", services, want)
		}
	}

	s.ask(t, request("d", desc("a", "metrics")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.client.ShouldRateLimit(ctx, request("")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a request with no domain: %v", err)
	}
	hr, err := http.Get(s.httpBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	for _, want := range []string{
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_config_load_error 0`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 2`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 2`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics lacks %s", want)
		}
	}
}
