package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestComparePeer sends the same request sequences to keyrate-rls and to
// envoyproxy/ratelimit, on one redis-server, the latter in its default
// mode and with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, and checks that
// each sequence agrees or differs as the README's comparison says, then
// measures the throughput of each. It runs only when KEYRATE_RLS_PEER
// names envoyproxy/ratelimit's binary, built outside this repository:
//
//	git clone https://github.com/envoyproxy/ratelimit /tmp/peer-rls
//	(cd /tmp/peer-rls && go build -o ratelimit ./src/service_cmd)
//	KEYRATE_RLS_PEER=/tmp/peer-rls/ratelimit KEYRATE_RLS_COMPARE_OUT=/tmp/compare.md \
//	  go test -run TestComparePeer -v .
//
// KEYRATE_RLS_COMPARE_OUT, when set, gets the tables in Markdown.
func TestComparePeer(t *testing.T) {
	peer := os.Getenv("KEYRATE_RLS_PEER")
	if peer == "" {
		t.Skip("set KEYRATE_RLS_PEER to envoyproxy/ratelimit's binary to compare with it (see the test's comment)")
	}
	redisAddr := startRedis(t)
	env, _ := runtimeTree(t, map[string]string{"cmp.yaml": compareConfig})
	keyrate := startPeerWayEnv(t, env)
	targets := []*target{
		{name: "keyrate-rls", client: keyrate.client, conn: keyrate.grpcAddr},
		startPeer(t, peer, env, redisAddr, "default:"),
		startPeer(t, peer, env, redisAddr, "stop:", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"),
	}
	var rows []string
	counts := map[relation]int{}
	for _, c := range compareCases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before()
			} else {
				awayFromBoundaries()
			}
			v := strconv.FormatUint(rand.Uint64(), 36)
			answers := make([][]string, len(targets))
			for i, tg := range targets {
				answers[i] = tg.send(c.seq(v))
			}
			t.Logf("keyrate-rls: %q\npeer:        %q\npeer-stop:   %q", answers[0], answers[1], answers[2])
			got := [2]relation{relate(answers[0], answers[1]), relate(answers[0], answers[2])}
			if got != c.want {
				t.Errorf("keyrate-rls against the peer, default and STOP: %v, want %v\nkeyrate-rls: %q\npeer:        %q\npeer-stop:   %q",
					got, c.want, answers[0], answers[1], answers[2])
			}
			counts[got[0]]++
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", c.name, got[0], got[1], c.why))
		})
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| sequence | against the peer's default | against STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT | why |\n| --- | --- | --- | --- |\n%s\n\n",
		strings.Join(rows, "\n"))
	fmt.Fprintf(&out, "%d sequences: against the default, %d the same, %d the same but for duration_until_reset, %d different.\n\n",
		len(compareCases), counts[same], counts[durations], counts[differs])

	// Throughput: every caller on its own connection, each call one
	// descriptor of 10,000 values, every one admitted.
	keyrateRedis := startBinary(t, append(append([]string{}, env...), "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr))
	out.WriteString("| service | budgets | callers | calls/s | p50 | p99 |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, m := range []struct {
		name, budgets, addr string
	}{
		{"keyrate-rls", "in process", targets[0].addr()},
		{"keyrate-rls", "Redis", keyrateRedis.grpcAddr},
		{"envoyproxy/ratelimit", "Redis", targets[1].addr()},
	} {
		rate, p50, p99 := throughput(t, m.addr, compareCallers, 5*time.Second)
		fmt.Fprintf(&out, "| %s | %s | %d | %.0f | %v | %v |\n", m.name, m.budgets, compareCallers, rate, p50, p99)
	}
	t.Log("\n" + out.String())
	if path := os.Getenv("KEYRATE_RLS_COMPARE_OUT"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(out.String()), 0o644))
	}
}

// compareCallers is how many callers the throughput runs have, each with a
// connection of its own: the few connections of some Envoy workers.
const compareCallers = 16

// compareConfig holds the rules of every sequence, one domain.
const compareConfig = `domain: cmp
descriptors:
  - key: per_second
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: per_minute
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: per_hour
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: per_day
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: unlimited
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: nested
    value: a
    descriptors:
      - key: sub
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: wild
    value: "w/*"
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shared
    value: "s/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: named
    rate_limit: {name: specific, unit: minute, requests_per_unit: 2}
  - key: replacer
    rate_limit:
      replaces: [{name: specific}]
      unit: minute
      requests_per_unit: 4
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// relation is how two services' answers to a sequence compare.
type relation int

const (
	same      relation = iota
	durations          // the same but for duration_until_reset
	differs
)

func (r relation) String() string {
	return [...]string{"same", "same but duration_until_reset", "differs"}[r]
}

// relate compares two services' answers, each a summary a call.
func relate(a, b []string) relation {
	switch {
	case slices.Equal(a, b):
		return same
	case slices.Equal(withoutDurations(a), withoutDurations(b)):
		return durations
	}
	return differs
}

func withoutDurations(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = timeless(x)
	}
	return out
}

// compareCase is a request sequence, its rules in compareConfig, and how
// keyrate-rls's answers compare with the peer's, default and STOP.
type compareCase struct {
	name   string
	seq    func(v string) []*rlspb.RateLimitRequest // v: a value of this run alone
	before func()                                   // default: awayFromBoundaries
	want   [2]relation
	why    string
}

// times returns n copies of r.
func times(n int, r *rlspb.RateLimitRequest) []*rlspb.RateLimitRequest {
	rs := make([]*rlspb.RateLimitRequest, n)
	for i := range rs {
		rs[i] = proto.Clone(r).(*rlspb.RateLimitRequest)
	}
	return rs
}

// weighted returns desc(key, value) with its own hits_addend.
func weighted(key, value string, n uint64) *rlv3.RateLimitDescriptor {
	d := desc(key, value)
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withHits(n uint32, r *rlspb.RateLimitRequest) *rlspb.RateLimitRequest {
	r.HitsAddend = n
	return r
}

var compareCases = []compareCase{
	{name: "under the limit", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(3, request("cmp", desc("per_minute", v)))
	}, want: [2]relation{durations, durations}, why: "duration_until_reset: until the oldest hit leaves the window, or until the clock's minute ends"},
	{name: "to the limit and over", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(7, request("cmp", desc("per_minute", v)))
	}, want: [2]relation{durations, durations}},
	{name: "a day's limit", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(2, request("cmp", desc("per_day", v)))
	}, want: [2]relation{durations, durations}},
	{name: "hits_addend of the request", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(2, withHits(3, request("cmp", desc("per_minute", v))))
	}, want: [2]relation{differs, differs}, why: "refused, keyrate-rls reports the 2 left; both peers count the refused 3 (STOP still counts the key that goes over) and report 0"},
	{name: "hits_addend above the limit", seq: func(v string) []*rlspb.RateLimitRequest {
		return append(times(1, withHits(6, request("cmp", desc("per_minute", v)))), request("cmp", desc("per_minute", v)))
	}, want: [2]relation{differs, differs}, why: "both peers count the 6 refused (STOP increments the key that goes over), so the next request is refused; keyrate-rls counted nothing and admits it"},
	{name: "descriptors of different hits_addend", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(3, request("cmp", weighted("per_minute", v, 1), weighted("per_hour", v, 2)))
	}, want: [2]relation{differs, differs}, why: "refused, keyrate-rls reports per_hour's 1 left; both peers count the refused 2 on it and report 0, and the default counts per_minute's hit too"},
	{name: "hits_addend 0 checks", seq: func(v string) []*rlspb.RateLimitRequest {
		return append(times(5, request("cmp", desc("per_minute", v))), request("cmp", weighted("per_minute", v, 0)))
	}, want: [2]relation{differs, differs}, why: "at exactly the limit the peer answers OK to a weight of 0 (0 more fits); keyrate-rls answers OVER_LIMIT when nothing is left"},
	{name: "one descriptor refuses, the other has room", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(5, request("cmp", desc("per_hour", v), desc("per_minute", v)))
	}, want: [2]relation{differs, durations}, why: "the default counts per_minute in every refused request; all or nothing (and STOP) count none"},
	{name: "a limit of 0", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(2, request("cmp", desc("blocked", v)))
	}, want: [2]relation{durations, durations}, why: "the peer gives it the second's duration_until_reset; keyrate-rls none, as no quota ever comes back"},
	{name: "a limit of 0 beside another", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(2, request("cmp", desc("blocked", v), desc("per_minute", v)))
	}, want: [2]relation{differs, durations}, why: "the default counts per_minute in the refused requests; STOP and all or nothing do not"},
	{name: "unlimited", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(2, request("cmp", desc("unlimited", v)))
	}, want: [2]relation{same, same}},
	{name: "no rule matches", seq: func(v string) []*rlspb.RateLimitRequest {
		return []*rlspb.RateLimitRequest{request("cmp", desc("nothing", v)), request("cmp", desc("nested", "b", "sub", v)), request("elsewhere", desc("per_minute", v))}
	}, want: [2]relation{same, same}},
	{name: "shadow mode over its limit", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(4, request("cmp", desc("shadow", v)))
	}, want: [2]relation{durations, durations}, why: "answered alike; the peers count the hits past the limit, keyrate-rls does not, as enforcing it would not: that shows only as the window moves"},
	{name: "nested descriptors", seq: func(v string) []*rlspb.RateLimitRequest {
		return append(times(3, request("cmp", desc("nested", "a", "sub", v))), request("cmp", desc("nested", "a")))
	}, want: [2]relation{durations, durations}},
	{name: "wildcard, a budget per value", seq: func(v string) []*rlspb.RateLimitRequest {
		return append(times(3, request("cmp", desc("wild", "w/"+v))), request("cmp", desc("wild", "w/"+v+"x")))
	}, want: [2]relation{durations, durations}},
	{name: "share_threshold", seq: func(v string) []*rlspb.RateLimitRequest {
		return []*rlspb.RateLimitRequest{request("cmp", desc("shared", "s/"+v)), request("cmp", desc("shared", "s/"+v+"x")), request("cmp", desc("shared", "s/"+v+"y"))}
	}, want: [2]relation{durations, durations}},
	{name: "replaces", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(3, request("cmp", desc("named", v), desc("replacer", v)))
	}, want: [2]relation{durations, durations}},
	{name: "quota_mode", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(4, request("cmp", desc("quota_a", v), desc("quota_b", v)))
	}, want: [2]relation{durations, differs}, why: "let through with quota_a over, the request counts against quota_b, as the default counts it; STOP counts nothing once a key is over, though the request went through"},
	{name: "limit override", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(3, request("cmp", overrideDesc(v, 2, typev3.RateLimitUnit_MINUTE, 0)))
	}, want: [2]relation{durations, durations}},
	{name: "limit override in an unknown domain", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(2, request("elsewhere", overrideDesc(v, 2, typev3.RateLimitUnit_MINUTE, 0)))
	}, want: [2]relation{same, same}},
	{name: "is_negative_hits", seq: func(v string) []*rlspb.RateLimitRequest {
		refund := weighted("per_minute", v, 2)
		refund.IsNegativeHits = true
		return []*rlspb.RateLimitRequest{request("cmp", weighted("per_minute", v, 3)), request("cmp", refund), request("cmp", desc("per_minute", v))}
	}, want: [2]relation{differs, differs}, why: "the peer ignores is_negative_hits and counts the 2 as hits; keyrate-rls checks such a descriptor and counts nothing"},
	{name: "an invalid request", seq: func(v string) []*rlspb.RateLimitRequest {
		return []*rlspb.RateLimitRequest{request("", desc("per_minute", v)), request("cmp")}
	}, want: [2]relation{differs, differs}, why: "both are errors; the peer's code is UNKNOWN, keyrate-rls's INVALID_ARGUMENT"},
	{name: "across a second's boundary", seq: func(v string) []*rlspb.RateLimitRequest {
		return times(2, request("cmp", desc("per_second", v)))
	}, before: lateInASecond, want: [2]relation{same, same}, why: "a second's window: both report 1s"},
	{name: "two, then two more across a second's boundary", seq: func(v string) []*rlspb.RateLimitRequest {
		rs := times(4, request("cmp", desc("per_second", v)))
		return rs
	}, before: lateInASecond, want: [2]relation{differs, differs}, why: "a fixed window starts again at the second: the peer admits 4 within 300ms under a limit of 2 a second; the sliding window admits 2"},
}

// awayFromBoundaries waits, when the clock is within a second of a whole
// minute, until it is past it, so that a fixed window does not start
// again in the middle of a sequence.
func awayFromBoundaries() {
	now := time.Now()
	if next := now.Truncate(time.Minute).Add(time.Minute); next.Sub(now) < time.Second {
		time.Sleep(time.Until(next.Add(50 * time.Millisecond)))
	}
}

// lateInASecond waits until 850ms into a second, so that a sequence sent
// then crosses the next whole second.
func lateInASecond() {
	now := time.Now()
	at := now.Truncate(time.Second).Add(850 * time.Millisecond)
	if at.Before(now) {
		at = at.Add(time.Second)
	}
	time.Sleep(time.Until(at))
}

// target is a service the sequences are sent to.
type target struct {
	name   string
	client rlspb.RateLimitServiceClient
	conn   string
}

func (tg *target) addr() string { return tg.conn }

// send sends the requests in turn and summarises each answer: the
// response (see summary), or the error's code. The fourth call of the
// boundary sequence goes after the second's boundary.
func (tg *target) send(reqs []*rlspb.RateLimitRequest) []string {
	out := make([]string, len(reqs))
	start := time.Now()
	for i, r := range reqs {
		if len(reqs) == 4 && i == 2 && reqs[0].GetDescriptors()[0].GetEntries()[0].GetKey() == "per_second" {
			time.Sleep(time.Until(start.Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := tg.client.ShouldRateLimit(ctx, r)
		cancel()
		if err != nil {
			out[i] = "error " + status.Code(err).String()
			continue
		}
		out[i] = summary(resp)
	}
	return out
}

// startPeerWayEnv starts keyrate-rls from env on free loopback ports,
// budgets in process, and returns it.
func startPeerWayEnv(t *testing.T, env []string) *server {
	return startBinary(t, append(append([]string{}, env...), "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0"))
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startPeer starts envoyproxy/ratelimit's binary at path from env, its
// budgets in the Redis at redisAddr under prefix, and returns it once it
// answers.
func startPeer(t *testing.T, path string, env []string, redisAddr, prefix string, more ...string) *target {
	t.Helper()
	grpcPort := freePort(t)
	cmd := exec.Command(path)
	cmd.Env = append(append(cleanEnv(), env...), append([]string{"USE_STATSD=false", "LOG_LEVEL=error",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(freePort(t)), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(freePort(t)),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "CACHE_KEY_PREFIX=" + prefix}, more...)...)
	logs, err := os.Create(filepath.Join(t.TempDir(), "peer.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logs.Close()
	})
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	client := rlspb.NewRateLimitServiceClient(conn)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := client.ShouldRateLimit(ctx, request("cmp", desc("unlimited", "ready")))
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "envoyproxy/ratelimit answers")
	return &target{name: "envoyproxy/ratelimit", client: client, conn: addr}
}

// throughput calls the service at addr from callers goroutines, each on
// its own connection, for d, and returns calls a second and the median and
// 99th percentile of a call's time.
func throughput(t *testing.T, addr string, callers int, d time.Duration) (float64, time.Duration, time.Duration) {
	t.Helper()
	reqs := make([]*rlspb.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = request("cmp", desc("per_day", "tp"+strconv.Itoa(i)))
	}
	var next atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range callers {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		client := rlspb.NewRateLimitServiceClient(conn)
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(deadline) {
				s := time.Now()
				resp, err := client.ShouldRateLimit(context.Background(), reqs[next.Add(1)%int64(len(reqs))])
				if !assert.NoError(t, err) || !assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode()) {
					return
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			took = append(took, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	if len(took) == 0 {
		return 0, 0, 0
	}
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return float64(len(took)) / elapsed.Seconds(), round(took[len(took)/2]), round(took[len(took)*99/100])
}
