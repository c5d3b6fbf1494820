package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The tests in this file make envoyproxy/ratelimit's own acceptance
// checks of keyrate-rls: the gRPC assertions of its integration tests
// testBasicBaseConfig and testShareThreshold, in the variant with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (a refused request does not
// count against the descriptors that had room, as all or nothing does),
// against the binary started as envoyproxy/ratelimit is: from its
// environment variables and a runtime directory of rules, one domain a
// file, budgets in process or in a redis-server with default options.

// peerRules are the rules of those tests, a domain a file, as a runtime
// directory holds them: RUNTIME_ROOT/ratelimit/config/*.yaml.
var peerRules = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
	"another.yaml": `domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key4
    rate_limit: {unit: day, requests_per_unit: 20}
`,
	"share_threshold.yaml": `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
`,
}

// runtimeTree writes files into a runtime directory under a new temporary
// root, RUNTIME_ROOT/ratelimit/config, and returns the environment that
// points at it.
func runtimeTree(t *testing.T, files map[string]string) (env []string, dir string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "runtime", "current")
	dir = filepath.Join(root, "ratelimit", "config")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, content := range files {
		write(t, filepath.Join(dir, name), content)
	}
	return []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config"}, dir
}

// startPeerWay starts the binary from envoyproxy/ratelimit's environment
// alone, no flag: the rules of peerRules, free loopback ports, budgets
// in process or, with redisAddr, in that Redis.
func startPeerWay(t *testing.T, redisAddr string, more ...string) *server {
	t.Helper()
	env, _ := runtimeTree(t, peerRules)
	env = append(env, "USE_STATSD=false", "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
	if redisAddr != "" {
		env = append(env, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr)
	}
	return startBinary(t, append(env, more...))
}

// peerWays runs f against the binary started the peer's way, in process
// and on a redis-server with its default options.
func peerWays(t *testing.T, f func(t *testing.T, s *server)) {
	t.Run("InProcess", func(t *testing.T) { f(t, startPeerWay(t, "")) })
	t.Run("Redis", func(t *testing.T) { f(t, startPeerWay(t, startRedis(t))) })
}

// status is a descriptor status as envoyproxy/ratelimit's tests build the
// one they expect: its duration_until_reset is the response's own, whole
// seconds only, so that the comparison checks that it has no fraction.
func peerStatus(code rlspb.RateLimitResponse_Code, perUnit uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, remaining uint32, got *rlspb.RateLimitResponse_DescriptorStatus) *rlspb.RateLimitResponse_DescriptorStatus {
	return &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: got.GetDurationUntilReset().GetSeconds()},
	}
}

// peerRequest is a request of one entry per descriptor, each a key and a
// value, with a hits_addend of 1.
func peerRequest(domain string, kv ...string) *rlspb.RateLimitRequest {
	r := request(domain)
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, desc(kv[i], kv[i+1]))
	}
	r.HitsAddend = 1
	return r
}

func assertProto(t *testing.T, want, got proto.Message, msgAndArgs ...any) {
	t.Helper()
	assert.True(t, proto.Equal(want, got), "want %v\n got %v %v", want, got, fmt.Sprint(msgAndArgs...))
}

// counter reads a rule's counter from /metrics: name is its stat
// (total_hits, over_limit, ...).
func (s *server) counter(t *testing.T, name, domain, rule string) int {
	t.Helper()
	resp, err := http.Get(s.httpBase + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ratelimit_service_rate_limit_` + name + `\{domain="` + regexp.QuoteMeta(domain) + `",rule="` + regexp.QuoteMeta(rule) + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestPeerBasicConfig(t *testing.T) { peerWays(t, testPeerBasicConfig) }

func testPeerBasicConfig(t *testing.T, s *server) {
	ctx := context.Background()
	const (
		ok   = rlspb.RateLimitResponse_OK
		over = rlspb.RateLimitResponse_OVER_LIMIT
	)
	// A domain the rules do not have: OK, no limit.
	resp, err := s.client.ShouldRateLimit(ctx, peerRequest("foo", "hello", "world"))
	require.NoError(t, err)
	assertProto(t, &rlspb.RateLimitResponse{
		OverallCode: ok,
		Statuses:    []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}},
	}, resp)
	// Counted as the peer counts ratelimit.service.rate_limit.foo.domain_not_found.
	assert.Equal(t, 1, s.metric(t, "ratelimit_service_rate_limit_domain_not_found"))

	resp, err = s.client.ShouldRateLimit(ctx, peerRequest("basic", "key1", "foo"))
	require.NoError(t, err)
	assertProto(t, &rlspb.RateLimitResponse{
		OverallCode: ok,
		Statuses:    []*rlspb.RateLimitResponse_DescriptorStatus{peerStatus(ok, 50, rlspb.RateLimitResponse_RateLimit_SECOND, 49, resp.Statuses[0])},
	}, resp)
	assert.Equal(t, 1, s.counter(t, "total_hits", "basic", "key1"))

	// A limit of a minute, gone over.
	value := strconv.FormatUint(rand.Uint64(), 10)
	for i := range 25 {
		resp, err := s.client.ShouldRateLimit(ctx, peerRequest("another", "key2", value))
		require.NoError(t, err)
		code, remaining := ok, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = over, 0
		}
		assertProto(t, &rlspb.RateLimitResponse{
			OverallCode: code,
			Statuses:    []*rlspb.RateLimitResponse_DescriptorStatus{peerStatus(code, 20, rlspb.RateLimitResponse_RateLimit_MINUTE, remaining, resp.Statuses[0])},
		}, resp, "call ", i)
		assert.Equal(t, i+1, s.counter(t, "total_hits", "another", "key2"), "total_hits, call %d", i)
		assert.Equal(t, max(i-19, 0), s.counter(t, "over_limit", "another", "key2"), "over_limit, call %d", i)
	}

	// Two descriptors of one domain: once key3 is over, a refused request
	// no longer counts against key2.
	value = strconv.FormatUint(rand.Uint64(), 10)
	for i := range 15 {
		resp, err := s.client.ShouldRateLimit(ctx, peerRequest("another", "key2", value, "key3", value))
		require.NoError(t, err)
		code, remaining1, remaining2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			code, remaining1, remaining2 = over, 10, 0
		}
		assertProto(t, &rlspb.RateLimitResponse{
			OverallCode: code,
			Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
				peerStatus(ok, 20, rlspb.RateLimitResponse_RateLimit_MINUTE, remaining1, resp.Statuses[0]),
				peerStatus(code, 10, rlspb.RateLimitResponse_RateLimit_HOUR, remaining2, resp.Statuses[1]),
			},
		}, resp, "call ", i)
		assert.Equal(t, i+26, s.counter(t, "total_hits", "another", "key2"), "key2 total_hits, call %d", i)
		assert.Equal(t, 5, s.counter(t, "over_limit", "another", "key2"), "key2 over_limit, call %d", i)
		assert.Equal(t, i+1, s.counter(t, "total_hits", "another", "key3"), "key3 total_hits, call %d", i)
		assert.Equal(t, max(i-9, 0), s.counter(t, "over_limit", "another", "key3"), "key3 over_limit, call %d", i)
	}

	// duration_until_reset counts down.
	first, err := s.client.ShouldRateLimit(ctx, peerRequest("another", "key4", "durTest"))
	require.NoError(t, err)
	time.Sleep(2 * time.Second) // as the original waits: the real clock must move
	second, err := s.client.ShouldRateLimit(ctx, peerRequest("another", "key4", "durTest"))
	require.NoError(t, err)
	assert.Less(t, second.Statuses[0].GetDurationUntilReset().GetSeconds(), first.Statuses[0].GetDurationUntilReset().GetSeconds())
}

func TestPeerShareThreshold(t *testing.T) { peerWays(t, testPeerShareThreshold) }

func testPeerShareThreshold(t *testing.T, s *server) {
	ctx := context.Background()
	const domain = "share-threshold-test"
	// share_threshold: every value of files/* shares one budget.
	for i := range 10 {
		resp, err := s.client.ShouldRateLimit(ctx, peerRequest(domain, "files", "files/a.pdf"))
		require.NoError(t, err)
		assert.Contains(t, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}, resp.GetOverallCode(), "call %d", i)
	}
	resp, err := s.client.ShouldRateLimit(ctx, peerRequest(domain, "files", "files/b.csv"))
	require.NoError(t, err)
	assertProto(t, &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
			peerStatus(rlspb.RateLimitResponse_OVER_LIMIT, 10, rlspb.RateLimitResponse_RateLimit_HOUR, 0, resp.Statuses[0]),
		},
	}, resp)

	// Without it, each value has a budget of its own.
	for i := range 10 {
		value := fmt.Sprintf("files_no_share/%d-%d", time.Now().UnixNano(), rand.Int64())
		resp, err := s.client.ShouldRateLimit(ctx, peerRequest(domain, "files_no_share", value))
		require.NoError(t, err)
		assertProto(t, &rlspb.RateLimitResponse{
			OverallCode: rlspb.RateLimitResponse_OK,
			Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
				peerStatus(rlspb.RateLimitResponse_OK, 10, rlspb.RateLimitResponse_RateLimit_HOUR, 9, resp.Statuses[0]),
			},
		}, resp, "call ", i)
	}
}

// A file added to the runtime directory is loaded as soon as it is written
// and one removed is unloaded, without a signal or a poll (-reload-interval
// 0), as envoyproxy/ratelimit watches its directory; so is a new version
// of the whole tree swapped in behind a link, RUNTIME_ROOT's.
func TestPeerConfigReload(t *testing.T) {
	base := t.TempDir()
	v1 := filepath.Join(base, "v1", "ratelimit", "config")
	require.NoError(t, os.MkdirAll(v1, 0o755))
	write(t, filepath.Join(v1, "basic.yaml"), peerRules["basic.yaml"])
	root := filepath.Join(base, "current")
	require.NoError(t, os.Symlink(filepath.Join(base, "v1"), root))
	s := startBinary(t, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0"},
		"-reload-interval", "0")
	ctx := context.Background()
	ask := func(kv ...string) string {
		t.Helper()
		resp, err := s.client.ShouldRateLimit(ctx, peerRequest(kv[0], kv[1:]...))
		require.NoError(t, err)
		return timeless(summary(resp))
	}
	assert.Equal(t, "OK | OK", ask("reload", "block", "foo"))

	reload := "domain: reload\ndescriptors:\n  - key: block\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: key1\n    rate_limit: {unit: second, requests_per_unit: 50}\n"
	write(t, filepath.Join(v1, "reload.yaml"), reload)
	s.log.waitFor(t, "configuration reloaded", 1)
	assert.Equal(t, "OK | OK 49/50 SECOND", ask("reload", "key1", "foo"))
	assert.Equal(t, "OVER_LIMIT | OVER_LIMIT 0/0 SECOND", ask("reload", "block", "foo"))

	require.NoError(t, os.Remove(filepath.Join(v1, "reload.yaml")))
	s.log.waitFor(t, "configuration reloaded", 2)
	assert.Equal(t, "OK | OK", ask("reload", "key1", "foo"))

	// A new tree, swapped in by renaming a new link over the old.
	v2 := filepath.Join(base, "v2", "ratelimit", "config")
	require.NoError(t, os.MkdirAll(v2, 0o755))
	write(t, filepath.Join(v2, "reload.yaml"), reload)
	require.NoError(t, os.Symlink(filepath.Join(base, "v2"), root+".new"))
	require.NoError(t, os.Rename(root+".new", root))
	s.log.waitFor(t, "configuration reloaded", 3)
	assert.Equal(t, "OK | OK 49/50 SECOND", ask("reload", "key1", "bar"))
	assert.Equal(t, "OK | OK", ask("basic", "key1", "foo"), "v1's domain is gone")
	assert.Equal(t, 4, s.metric(t, "ratelimit_service_config_load_success"))
}

// metric returns the value of a metric with no labels from /metrics.
func (s *server) metric(t *testing.T, name string) int {
	t.Helper()
	resp, err := http.Get(s.httpBase + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindSubmatch(body)
	require.NotNil(t, m, "%s in /metrics", name)
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// A setting of envoyproxy/ratelimit that keyrate-rls does not honour is
// named at start, in a WARN line; one it cannot go on without stops it.
func TestPeerSettingsNotHonoured(t *testing.T) {
	env, _ := runtimeTree(t, peerRules)
	s := startBinary(t, append(env, "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0",
		"USE_STATSD=true", "REDIS_PIPELINE_WINDOW=150us"))
	s.log.waitFor(t, "serving", 1)
	for _, name := range []string{"USE_STATSD", "REDIS_PIPELINE_WINDOW"} {
		assert.Regexp(t, `level=WARN msg="setting not honoured: `+name+` `, s.log.String())
	}

	cmd := exec.Command(builtBinary(t))
	cmd.Env = append(cleanEnv(), append(env, "BACKEND_TYPE=memcache", "GRPC_PORT=0", "PORT=0")...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, string(out), "BACKEND_TYPE is memcache")
}

// GRPC_UDS serves gRPC on a Unix socket; DEBUG_PORT the debug server, its
// /rlconfig listing the rules and /stats the counters; USE_PROMETHEUS the metrics on
// PROMETHEUS_ADDR and PROMETHEUS_PATH.
func TestPeerSocketDebugPrometheus(t *testing.T) {
	env, _ := runtimeTree(t, peerRules)
	sock := filepath.Join(t.TempDir(), "rls.sock")
	debug, prom := freePort(t), freePort(t)
	s := startBinary(t, append(env, "GRPC_UDS="+sock, "HOST=127.0.0.1", "PORT=0",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debug),
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+strconv.Itoa(prom), "PROMETHEUS_PATH=/stats/prometheus"))
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, peerRequest("basic", "key1", "uds"))
	require.NoError(t, err)
	assert.Equal(t, "OK | OK 49/50 SECOND", timeless(summary(resp)))

	get := func(url string) string {
		t.Helper()
		hr, err := http.Get(url)
		require.NoError(t, err)
		defer hr.Body.Close()
		require.Equal(t, http.StatusOK, hr.StatusCode, url)
		body, err := io.ReadAll(hr.Body)
		require.NoError(t, err)
		return string(body)
	}
	assert.Contains(t, get(fmt.Sprintf("http://127.0.0.1:%d/rlconfig", debug)), "basic.key1: requests_per_unit=50 window=1s, shadow_mode: false, quota_mode: false\n")
	// /stats lists the counters as the peer's does, "name: value" a line.
	_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, peerRequest("nosuch", "a", "1", "b", "2"))
	require.NoError(t, err)
	stats := get(fmt.Sprintf("http://127.0.0.1:%d/stats", debug))
	assert.Contains(t, stats, "ratelimit_service_rate_limit_total_hits{domain=\"basic\",rule=\"key1\"}: 1\n")
	assert.Contains(t, stats, "ratelimit_service_config_load_success: 1\n")
	assert.Contains(t, stats, "ratelimit_service_rate_limit_domain_not_found: 2\n")
	assert.NotContains(t, stats, "nosuch", "a domain from a request")
	assert.Contains(t, get(fmt.Sprintf("http://127.0.0.1:%d/", debug)), "/stats: print out stats\n")
	assert.Contains(t, get(fmt.Sprintf("http://127.0.0.1:%d/stats/prometheus", prom)), `ratelimit_service_rate_limit_total_hits{domain="basic",rule="key1"} 1`)
	assert.Contains(t, get(s.httpBase+"/healthcheck"), "OK")
}
