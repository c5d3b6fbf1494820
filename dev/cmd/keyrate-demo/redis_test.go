package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// startRedis runs a redis-server on a free loopback port for the test (see
// redistest.StartT) and returns a client of it, as dialRedis makes one.
func startRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	addr := redistest.StartT(t).Addr()
	c, err := dialRedis(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, addr
}

// Two demo servers on one Redis share each client's budget: what one
// admitted counts on the other, route by route, and the keys are the
// demo's own.
func TestRedisBudgetsAreShared(t *testing.T) {
	client, addr := startRedis(t)
	if got, want := hints("http://127.0.0.1:8080", config{Redis: client, RedisAddr: addr}), "Budgets live in Redis at "+addr; !strings.Contains(got, want) {
		t.Errorf("start-up hints lack %q:\n%s", want, got)
	}
	a, _ := newTestServer(t, config{Redis: client})
	b, _ := newTestServer(t, config{Redis: client})

	for i, h := range []http.Handler{a, b, a} {
		if rec := do(h, "/api/status", "X-API-Key", "alice"); rec.Code != 200 {
			t.Fatalf("request %d of 3: %d", i, rec.Code)
		}
	}
	rec := do(b, "/api/status", "X-API-Key", "alice")
	if rec.Code != 429 || rec.Header().Get("RateLimit") != `"status";r=0;t=60` {
		t.Fatalf("fourth request, on the other server: %d %v, want 429 after 3 of 3 on both together", rec.Code, rec.Header())
	}
	if rec := do(a, "/api/status", "X-API-Key", "bob"); rec.Code != 200 {
		t.Fatalf("another client: %d, want its own budget", rec.Code)
	}
	if rec := do(b, "/api/burst", "X-API-Key", "alice"); rec.Code != 200 || rec.Header().Get("RateLimit") != `"burst";r=9;t=10` {
		t.Fatalf("another route: %d %v, want its own budget", rec.Code, rec.Header())
	}

	keys, err := client.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Errorf("Redis holds %d keys, want 3 (alice and bob on status, alice on burst): %q", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, redisPrefix) {
			t.Errorf("key %q lacks the prefix %q", k, redisPrefix)
		}
	}
}

// A wrong -redis address stops the demo at start-up with a clear error.
func TestDialRedisFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = dialRedis(t.Context(), addr)
	if err == nil || !strings.Contains(err.Error(), "no Redis at "+addr) {
		t.Fatalf("dialRedis(%s) = %v, want an error naming the address", addr, err)
	}
}

// On Redis too, /api/export is decided under both its policies at once and
// "pro-" keys get their tier, across servers.
func TestRedisPoliciesAndTiers(t *testing.T) {
	client, _ := startRedis(t)
	a, _ := newTestServer(t, config{Redis: client})
	b, seen := newTestServer(t, config{Redis: client})

	for i, h := range []http.Handler{a, b} {
		if rec := do(h, "/api/export", "X-API-Key", "alice"); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != exportPolicy {
			t.Fatalf("export %d: %d %v", i+1, rec.Code, rec.Header())
		}
	}
	rec := do(b, "/api/export", "X-API-Key", "alice")
	if rec.Code != 429 || !strings.HasPrefix(rec.Header().Get("RateLimit"), `"export-burst";r=0;t=10, "export-hourly";r=3;t=3600`) ||
		!strings.Contains(rec.Body.String(), "export-burst") || strings.Contains(rec.Body.String(), "export-hourly") {
		t.Fatalf("third export: %d %v %s, want 429 by export-burst alone", rec.Code, rec.Header(), rec.Body)
	}
	parts := (*seen)[len(*seen)-1].Decision.Policies()
	if len(parts) != 2 || parts[0].Allowed || !parts[1].Allowed || parts[1].Remaining != 3 {
		t.Errorf("third export's policies %+v, want export-burst refusing and export-hourly with 3 left", parts)
	}

	for i := range 10 {
		h := []http.Handler{a, b}[i%2]
		if rec := do(h, "/api/status", "X-API-Key", "pro-alice"); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != `"status";q=10;w=60` {
			t.Fatalf("pro status %d: %d %v", i+1, rec.Code, rec.Header())
		}
	}
	if rec := do(a, "/api/status", "X-API-Key", "pro-alice"); rec.Code != 429 {
		t.Errorf("eleventh pro status: %d, want 429 after 10 on both servers", rec.Code)
	}
	if rec := do(a, "/api/status", "X-API-Key", "alice"); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != `"status";q=3;w=60` {
		t.Errorf("a free key: %d %v, want the default tier", rec.Code, rec.Header())
	}
}

// In Redis too only failed logins count: successes are given back in
// Redis, so any number of them leave the budget whole, the 6th failure
// within 15 minutes is refused, and the page shows the refunds.
func TestRedisLoginCountsOnlyFailures(t *testing.T) {
	client, _ := startRedis(t)
	h, _ := newTestServer(t, config{Redis: client})
	for i := range 8 {
		if rec := login(h, form, right); rec.Code != 200 {
			t.Fatalf("success %d: %d", i+1, rec.Code)
		}
	}
	for i := range 5 {
		if rec := login(h, form, wrong); rec.Code != 401 {
			t.Fatalf("failure %d: %d, want 401: the successes should have been given back", i+1, rec.Code)
		}
	}
	if rec := login(h, form, right); rec.Code != 429 {
		t.Fatalf("after 5 failures within 15 minutes: %d, want 429", rec.Code)
	}
	if got := hints("http://127.0.0.1:8080", config{Redis: client}); !strings.Contains(got, "/api/login   5 per 900s, failed attempts only") {
		t.Errorf("the start-up hints do not say that login counts failed attempts only:\n%s", got)
	}
	hub, err := newLive(config{Redis: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	rec := httptest.NewRecorder()
	hub.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/live/config", nil))
	var cfg struct {
		Routes []struct {
			Name, Note string
			Refunds    bool
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, r := range cfg.Routes {
		if r.Name == "login" && !r.Refunds {
			t.Errorf("the page's login route in Redis mode: %+v, want refunds", r)
		}
	}
}

// With -redis-fallback, a Redis that cannot be reached (here, a port where
// nothing listens) leaves each route decided in this process at the share
// of its limit: search's 20 at 0.5 admits 10 and refuses the rest with a
// 429, never an error and never unlimited; the decisions say so, in the
// log line and in /metrics. Without it, the same requests are served
// unlimited, each an error.
func TestRedisFallback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })

	for _, share := range []float64{0.5, 0} {
		h, seen := newTestServer(t, config{Redis: client, RedisFallback: share})
		var codes []int
		for range 12 {
			codes = append(codes, do(h, "/api/search", "X-API-Key", "alice").Code)
		}
		want := []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429}
		if share == 0 {
			want = slices.Repeat([]int{200}, 12) // failing open
		}
		if !slices.Equal(codes, want) {
			t.Errorf("share %v: status codes %v, want %v", share, codes, want)
		}
		for i, d := range *seen {
			if (share > 0) != (d.Err == nil && d.Decision.Fallback) {
				t.Fatalf("share %v, decision %d: %+v, want the fallback's decision only with a share", share, i, d)
			}
		}
		if share == 0 {
			continue
		}
		body := do(h, metricsPath).Body.String()
		for _, line := range []string{
			`keyrate_decisions_total{route="search",source="fallback"} 12`,
			`keyrate_decisions_total{route="search",source="store"} 0`,
			`keyrate_requests_total{result="limited",route="search"} 2`,
		} {
			if !strings.Contains(body, line+"\n") {
				t.Errorf("/metrics lacks %q", line)
			}
		}
	}

	var log strings.Builder
	decisionLogger(&log)(decision{Route: "search", Key: "X-Api-Key:2bd806c9",
		Decision: keyrate.Decision{Allowed: true, Limit: 10, Remaining: 9, Fallback: true}})
	if !strings.HasSuffix(log.String(), "allowed  remaining=9 fallback\n") {
		t.Errorf("log line %q, want it to say the fallback decided", log.String())
	}
}

// -redis-fallback takes a share in (0, 1] with -redis, or 0.
func TestCheckFallback(t *testing.T) {
	for _, c := range []struct {
		share float64
		redis string
		ok    bool
	}{
		{0, "", true},
		{0, "127.0.0.1:6379", true},
		{0.5, "127.0.0.1:6379", true},
		{1, "127.0.0.1:6379", true},
		{0.5, "", false},
		{1.5, "127.0.0.1:6379", false},
		{-0.5, "127.0.0.1:6379", false},
	} {
		if err := checkFallback(c.share, c.redis); (err == nil) != c.ok {
			t.Errorf("checkFallback(%v, %q) = %v, want ok %v", c.share, c.redis, err, c.ok)
		}
	}
}

// logCapture is a go-redis logger that keeps every line, so that a test
// can check what the pool would have printed.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCapture) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *logCapture) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// captureRedisLog sends go-redis's log lines to a logCapture until the
// test ends, and then to the standard logger.
func captureRedisLog(t *testing.T) *logCapture {
	l := &logCapture{}
	redis.SetLogger(l)
	t.Cleanup(func() { redis.SetLogger(stdRedisLog{}) })
	return l
}

type stdRedisLog struct{}

func (stdRedisLog) Printf(_ context.Context, format string, v ...any) {
	log.Printf("redis: "+format, v...)
}

// closedAddr is a loopback host:port where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// -redis takes a redis:// URL with a password, as go-redis reads it, and
// a plain host:port; against a Redis that asks for that password, the URL
// reaches it, the plain address and a wrong password do not, and no
// message, go-redis's log included, shows a password.
func TestDialRedisURL(t *testing.T) {
	const password = "s3cret-pw"
	addr := redistest.StartT(t).Addr()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	if err := admin.ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	logged := captureRedisLog(t)

	c, err := dialRedis(t.Context(), "redis://:"+password+"@"+addr+"/2")
	if err != nil {
		t.Fatalf("dialRedis(redis://:PASSWORD@%s/2): %v", addr, err)
	}
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if db := c.Options().DB; db != 2 {
		t.Errorf("the client uses database %d, want 2 from the URL's path", db)
	}
	c.Close()

	for _, bad := range []string{addr, "redis://:wrong-" + password + "@" + addr} {
		_, err := dialRedis(t.Context(), bad)
		if err == nil {
			t.Fatalf("dialRedis(%s) reached a Redis that asks for a password", shownRedis(bad))
		}
		if msg := err.Error(); strings.Contains(msg, password) || !strings.Contains(msg, "no Redis at "+shownRedis(bad)) {
			t.Errorf("dialRedis(%s) = %q, want it to name %s and no password", shownRedis(bad), msg, shownRedis(bad))
		}
	}
	if strings.Contains(logged.String(), password) {
		t.Errorf("go-redis logged the password:\n%s", logged)
	}
}

// A -redis URL that cannot be reached or read fails with an error that
// shows it without its password (not "too many colons"), and go-redis
// logs no password either; the start-up hints show it the same way.
func TestRedisURLNeverShowsThePassword(t *testing.T) {
	logged := captureRedisLog(t)
	closed := closedAddr(t)
	for in, want := range map[string]string{
		"redis://:s3cret@" + closed:              "no Redis at redis://xxxxx@" + closed,
		"redis://user:s3cret@" + closed + "/0":   "no Redis at redis://xxxxx@" + closed + "/0",
		"rediss://:s3cret@" + closed:             "no Redis at rediss://xxxxx@" + closed,
		"redis://:s3cret@" + closed + "/x":       "-redis redis://xxxxx@" + closed + "/x: not a Redis URL",
		"redis://:s3/cret@" + closed:             "-redis redis://xxxxx@" + closed + ": not a Redis URL",
		"redis://:s3cret@[::1":                   "-redis redis://xxxxx@[::1: not a Redis URL",
		"http://:s3cret@" + closed:               "-redis http://xxxxx@" + closed + ": not a Redis URL",
		"http://" + closed:                       "-redis http://" + closed + ": redis: invalid URL scheme: http",
		"redis://" + closed + "/?dial_timeout=x": "-redis redis://" + closed + "/?dial_timeout=x: redis: invalid dial_timeout duration",
	} {
		_, err := dialRedis(t.Context(), in)
		if err == nil {
			t.Fatalf("dialRedis(%s): no error", shownRedis(in))
		}
		msg := err.Error()
		if strings.Contains(msg, "s3") || strings.Contains(msg, "cret") || !strings.HasPrefix(msg, want) {
			t.Errorf("dialRedis(%s) = %q, want it to start %q and show no password", shownRedis(in), msg, want)
		}
	}
	if strings.Contains(logged.String(), "cret") {
		t.Errorf("go-redis logged the password:\n%s", logged)
	}
	if got := hints("http://127.0.0.1:8080", config{Redis: redis.NewClient(&redis.Options{Addr: closed}), RedisAddr: shownRedis("redis://:s3cret@" + closed)}); strings.Contains(got, "s3cret") ||
		!strings.Contains(got, "Budgets live in Redis at redis://xxxxx@"+closed) {
		t.Errorf("the start-up hints show %q", got)
	}
}

// The demo run with -redis redis://:PASSWORD@host:port, where no Redis
// answers, exits 1 with a message naming the URL without its password,
// and prints the password nowhere.
func TestDemoBinaryRedisURL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo binary")
	}
	bin := demoBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := "redis://:s3cret@" + closedAddr(t)
	out, err := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0", "-redis", url).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("demo with an unreachable -redis: %v, want exit status 1\n%s", err, out)
	}
	if strings.Contains(string(out), "s3cret") || strings.Contains(string(out), "too many colons") ||
		!strings.Contains(string(out), "no Redis at "+shownRedis(url)) {
		t.Errorf("output:\n%s\nwant it to name %s, without the password", out, shownRedis(url))
	}
}
