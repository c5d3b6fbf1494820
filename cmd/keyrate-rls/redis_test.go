package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// startRedis runs a redis-server until tb ends and returns its address
// (see redistest.StartT).
func startRedis(tb testing.TB) string { return redistest.StartT(tb).Addr() }

// stores runs f against the binary with budgets in process, and with
// budgets in a redis-server of the test's own (which the test skips
// without, or fails without under KEYRATE_INTEGRATION=1).
func stores(t *testing.T, f func(t *testing.T, args ...string)) {
	t.Run("InProcess", func(t *testing.T) { f(t) })
	t.Run("Redis", func(t *testing.T) { f(t, "-redis", startRedis(t)) })
}

// Two keyrate-rls on one redis-server share one budget per descriptor
// value, with exact limit_remaining whichever answers, and decide each
// request all or nothing across them.
func TestBinaryRedisSharedBudget(t *testing.T) {
	addr := startRedis(t)
	a := startServer(t, binaryConfig(t), "-redis", addr)
	b := startServer(t, binaryConfig(t), "-redis", addr)
	marketing := request("messaging", desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111"))
	for i, want := range []string{
		"OK | OK 4/5 DAY | OK 99/100 DAY",
		"OK | OK 3/5 DAY | OK 98/100 DAY",
		"OK | OK 2/5 DAY | OK 97/100 DAY",
		"OK | OK 1/5 DAY | OK 96/100 DAY",
		"OK | OK 0/5 DAY | OK 95/100 DAY",
		"OVER_LIMIT | OVER_LIMIT 0/5 DAY | OK 95/100 DAY",
		"OVER_LIMIT | OVER_LIMIT 0/5 DAY | OK 95/100 DAY",
	} {
		s := []*server{a, b}[i%2]
		if got := s.ask(t, marketing); got != want {
			t.Errorf("call %d, on server %d:\n got %s\nwant %s", i, i%2, got, want)
		}
	}
	// The refusals recorded nothing against to_number, on either server.
	if got := b.ask(t, request("messaging", desc("to_number", "2061111111"))); got != "OK | OK 94/100 DAY" {
		t.Errorf("to_number alone after the refusals: %s", got)
	}
	both := request("d", desc("a", "shared"), desc("b", "shared"))
	for i, want := range []string{
		"OK | OK 0/1 HOUR | OK 4/5 HOUR",
		"OVER_LIMIT | OVER_LIMIT 0/1 HOUR | OK 4/5 HOUR",
	} {
		if got := []*server{a, b}[i].ask(t, both); got != want {
			t.Errorf("all or nothing, call %d:\n got %s\nwant %s", i, got, want)
		}
	}
	keys, err := redis.NewClient(&redis.Options{Addr: addr}).Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, defaultRedisPrefix) {
			t.Errorf("key %q lacks the prefix %q", k, defaultRedisPrefix)
		}
	}
	if len(keys) != 4 {
		t.Errorf("Redis holds %d keys, want 4 (two per request decided): %q", len(keys), keys)
	}
}

// A paused Redis (SIGSTOP): with -redis-fallback, requests are decided in
// the process at the share of each limit, all or nothing, and counted as
// the fallback's; without, they fail with UNAVAILABLE, at once after the
// first. Once Redis runs again, its budgets decide again.
func TestBinaryRedisOutage(t *testing.T) {
	addr := startRedis(t)
	withFallback := startServer(t, binaryConfig(t), "-redis", addr, "-redis-fallback", "0.5", "-redis-timeout", "100ms")
	without := startServer(t, binaryConfig(t), "-redis", addr, "-redis-timeout", "100ms")
	r := request("d", desc("b", "outage"))
	if got := withFallback.ask(t, r); got != "OK | OK 4/5 HOUR" {
		t.Fatalf("before the outage: %s", got)
	}
	pid := redisPID(t, addr)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			syscall.Kill(pid, syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()

	// The fallback holds 5 x 0.5 = 2 (rounded down), of its own.
	for i, want := range []string{"OK | OK 1/2 HOUR", "OK | OK 0/2 HOUR", "OVER_LIMIT | OVER_LIMIT 0/2 HOUR"} {
		if got := withFallback.ask(t, r); got != want {
			t.Errorf("during the outage, call %d:\n got %s\nwant %s", i, got, want)
		}
	}
	// a's limit of 1 at 0.5 is still 1: never 0.
	if got := withFallback.ask(t, request("d", desc("a", "outage"), desc("b", "outage"))); got != "OVER_LIMIT | OK 1/1 HOUR | OVER_LIMIT 0/2 HOUR" {
		t.Errorf("all or nothing in the fallback: %s", got)
	}
	for i := range 4 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := without.client.ShouldRateLimit(ctx, r)
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("without a fallback, call %d: %v, want UNAVAILABLE", i, err)
		}
		if took := time.Since(start); i > 0 && took >= 100*time.Millisecond {
			t.Errorf("without a fallback, call %d took %v, want an answer at once once the breaker is open", i, took)
		}
	}

	resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := withFallback.ask(t, request("d", desc("b", "after")))
		if got == "OK | OK 4/5 HOUR" {
			break // decided by Redis again: its limit of 5
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision from Redis 10s after SIGCONT; the last: %s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Redis holds the hit it admitted before the outage and the first call
	// of each server during it, which waited out its budget and which Redis
	// ran once it could; the fallback's hits never reached it.
	if got := withFallback.ask(t, r); got != "OK | OK 1/5 HOUR" {
		t.Errorf("after the outage: %s, want Redis's count: 3 hits, and this one", got)
	}
	resp, err := http.Get(withFallback.httpBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := regexp.MustCompile(`keyrate_decisions_total\{route="d",source="fallback"\} (\d+)`).FindSubmatch(body); m == nil || string(m[1]) == "0" {
		t.Errorf("/metrics counts no fallback decisions for d")
	}
}

// redisPID returns the process id of the redis-server at addr.
func redisPID(t *testing.T, addr string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`process_id:(\d+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no process_id in INFO server:\n%s", info)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// A key sent to Redis reads back its domain (the hash tag's group) and its
// tier, whatever bytes the domain holds.
func TestRedisKey(t *testing.T) {
	for _, domain := range []string{"", "edge", "a\x00b", strings.Repeat("d", 300)} {
		k := redisKey(domain, storeKey("r7", []byte("\x01x")))
		if got := domainOf(k); got != domain {
			t.Errorf("domain %q read back as %q", domain, got)
		}
		if got := redisTierOf(k); got != "r7" {
			t.Errorf("domain %q: tier read back as %q", domain, got)
		}
	}
	for _, bad := range []string{"", "\x09short", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"} {
		if d, tier := domainOf(bad), redisTierOf(bad); d != "" || tier != "" {
			t.Errorf("%q read as domain %q, tier %q; want none", bad, d, tier)
		}
	}
}

// Two keyrate-rls with -redis-leases on one redis-server share one budget
// per descriptor value exactly, a descriptor decided from each one's lease.
func TestBinaryRedisLeases(t *testing.T) {
	addr := startRedis(t)
	a := startServer(t, binaryConfig(t), "-redis", addr, "-redis-leases", "100ms")
	b := startServer(t, binaryConfig(t), "-redis", addr, "-redis-leases", "100ms")
	one := request("messaging", desc("message_type", "marketing", "to_number", "2061111111"))
	ok := 0
	for i := range 12 {
		got := []*server{a, b}[i%2].ask(t, one)
		if strings.HasPrefix(got, "OK ") {
			ok++
		}
	}
	if ok != 5 {
		t.Errorf("12 calls under 5 a day on two replicas with leases: %d admitted, want 5", ok)
	}
}

// The Redis flags are checked: one of -redis and -redis-cluster, the other
// -redis-... options only with one of them, and sane values.
func TestRedisFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for none
	}{
		{[]string{"-redis", "127.0.0.1:6379"}, ""},
		{[]string{"-redis-cluster", "10.0.0.1:6379,10.0.0.2:6379", "-redis-fallback", "0.5"}, ""},
		{[]string{"-redis", "a:1", "-redis-cluster", "b:1"}, "exclusive"},
		{[]string{"-redis-fallback", "0.5"}, "-redis-fallback need -redis"},
		{[]string{"-redis", "a:1", "-redis-fallback", "1.5"}, "-redis-fallback is 1.5"},
		{[]string{"-redis", "a:1", "-redis-timeout", "0s"}, "-redis-timeout"},
		{[]string{"-redis", "a:1", "-redis-leases", "-1s"}, "-redis-leases is -1s"},
		{[]string{"-redis-leases", "100ms"}, "-redis-leases need -redis"},
		{[]string{"-redis", "a:1", "-redis-deny-cache", "0", "-redis-deny-cache-max-hold", "2s"}, "-redis-deny-cache-max-hold"},
	} {
		o, err := parseFlags(append([]string{"-config", "rules.yaml"}, c.args...), io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.want == "" && o.redis == nil:
			t.Errorf("%q: no Redis store", c.args)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if o, err := parseFlags([]string{"-config", "rules.yaml"}, io.Discard); err != nil || o.redis != nil {
		t.Errorf("no Redis flags: %+v, %v; want budgets in process", o.redis, err)
	}
	o, _ := parseFlags([]string{"-config", "rules.yaml", "-redis-cluster", "a:1,b:2", "-max-keys", "5"}, io.Discard)
	if len(o.redis.cluster) != 2 || o.redis.fallbackKeys != 5 || o.redis.prefix != defaultRedisPrefix || o.redis.denyCache != 10_000 {
		t.Errorf("parsed %+v", o.redis)
	}
}

// With the deny cache, a request refused without a round trip still tells
// how its other descriptors stand, not "0 left" with no duration.
func TestDenyCacheDescribesTheOthers(t *testing.T) {
	st, err := newRedisStore(context.Background(), redisOptions{
		addr: startRedis(t), prefix: defaultRedisPrefix, timeout: time.Second, denyCache: 100,
	})
	require.NoError(t, err)
	h := newHarnessOn(t, st, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 5}
`)
	both := request("d", desc("a", "x"), desc("b", "y"))
	want := []string{
		"OK | OK 0/1 HOUR t=1h0m0s | OK 4/5 HOUR t=1h0m0s",
		"OVER_LIMIT | OVER_LIMIT 0/1 HOUR t=1h0m0s | OK 4/5 HOUR t=1h0m0s", // refused by Redis, which holds it
		"OVER_LIMIT | OVER_LIMIT 0/1 HOUR t=1h0m0s | OK 4/5 HOUR t=1h0m0s", // refused by the deny cache
	}
	for i, w := range want {
		assert.Equal(t, w, h.ask(t, both), "call %d", i)
	}
}

// -redis and -redis-cluster take a redis:// or rediss:// URL as go-redis
// reads it, as REDIS_URL does: its address, credentials, database and
// TLS. No error quotes the URL's password.
func TestRedisURL(t *testing.T) {
	o, err := parseFlags([]string{"-config", "rules.yaml", "-redis", "redis://:s3cret@h:6380/2"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "h:6380", o.redis.addr)
	assert.Equal(t, redisConn{password: "s3cret", db: 2}, o.redis.conn)

	o, err = parseFlags([]string{"-config", "rules.yaml", "-redis", "rediss://user:s3cret@h:6380"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "h:6380", o.redis.addr)
	assert.Equal(t, "user", o.redis.conn.username)
	assert.NotNil(t, o.redis.conn.tls, "rediss:// is TLS")

	o, err = parseFlags([]string{"-config", "rules.yaml", "-redis-cluster", "redis://:s3cret@a:1,b:2"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1", "b:2"}, o.redis.cluster)
	assert.Equal(t, "s3cret", o.redis.conn.password)

	o, err = parseOptions(nil, envOf("REDIS_URL=redis://:s3cret@h:6380/3"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "h:6380", o.redis.addr)
	assert.Equal(t, 3, o.redis.conn.db)

	for _, bad := range []string{"redis://:s3cret@h:6380/notadb", "redis://:s3cret@h:port", "redis://:s3cret@h:6380/1?nosuch=1"} {
		_, err := parseFlags([]string{"-config", "rules.yaml", "-redis", bad}, io.Discard)
		if assert.Error(t, err, bad) {
			assert.NotContains(t, err.Error(), "s3cret", bad)
			assert.Contains(t, err.Error(), "-redis", bad)
		}
		_, err = parseOptions(nil, envOf("REDIS_URL="+bad), io.Discard)
		if assert.Error(t, err, bad) {
			assert.NotContains(t, err.Error(), "s3cret", bad)
		}
	}
}

// The binary serves on the Redis of a redis:// URL given to -redis, and
// when that Redis cannot be reached, says where without its password.
func TestBinaryRedisURL(t *testing.T) {
	s := startServer(t, binaryConfig(t), "-redis", "redis://"+startRedis(t)+"/0")
	assert.Equal(t, "OK | OK 4/5 HOUR", s.ask(t, request("d", desc("b", "url"))))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cmd := exec.Command(builtBinary(t), "-config", s.config, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0",
		"-redis", "redis://:s3cret@"+addr+"/0")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "no Redis there")
	assert.Contains(t, string(out), "no Redis at "+addr)
	assert.NotContains(t, string(out), "s3cret")
	assert.NotContains(t, string(out), "too many colons")
}
