package main

import (
	"context"
	"fmt"
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

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// peerEnv names the envoyproxy/ratelimit binary TestRedisPeerTable
// measures keyrate-rls against, built from that project's repository,
// outside this one.
const peerEnv = "KEYRATE_RLS_PEER"

// peerConfig is the rules both services run: three descriptor keys, each
// under a limit no run reaches, so that every request is admitted and
// every descriptor recorded.
const peerConfig = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// TestRedisPeerTable puts keyrate-rls with budgets in Redis (-redis, and
// with -redis-leases 100ms) beside envoyproxy/ratelimit (its Redis backend, default settings, and
// with REDIS_PIPELINE_WINDOW=150us, the setting its README recommends for
// throughput) on one local redis-server, the same rules and the same
// requests: 64 concurrent gRPC calls over 8 connections, each caller on
// keys of its own (100 each), requests of one descriptor and of three, and
// every caller on one hot value of one descriptor.
// Each cell runs KEYRATE_RLS_SECONDS (3 by default) after a warm-up, in
// KEYRATE_RLS_ROUNDS rounds (3) that take the services in turn; the
// table gives each cell's median round: requests per second, each call's
// latency (p50, p99), the Redis server's CPU per request (INFO cpu) and
// the commands Redis ran per request (INFO commandstats, those inside
// scripts included). Set KEYRATE_RLS_PEER to the peer's binary.
func TestRedisPeerTable(t *testing.T) {
	peer := os.Getenv(peerEnv)
	if peer == "" {
		t.Skipf("set %s to the path of envoyproxy/ratelimit's binary to measure keyrate-rls beside it", peerEnv)
	}
	seconds := peerEnvInt(t, "KEYRATE_RLS_SECONDS", 3)
	rounds := peerEnvInt(t, "KEYRATE_RLS_ROUNDS", 3)
	addr := startRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()

	type service struct {
		name string
		addr string
	}
	kr := startServer(t, peerConfig, "-redis", addr, "-log-level", "warn")
	leased := startServer(t, peerConfig, "-redis", addr, "-redis-leases", "100ms", "-log-level", "warn")
	services := []service{
		{"keyrate-rls", kr.conn.Target()},
		{"keyrate-rls, -redis-leases 100ms", leased.conn.Target()},
		{"envoyproxy/ratelimit", startBenchPeer(t, peer, addr, "0")},
		{"envoyproxy/ratelimit, 150µs pipeline window", startBenchPeer(t, peer, addr, "150us")},
	}
	shapes := []peerShape{{1, false}, {3, false}, {1, true}}
	results := map[string][]peerLoad{}
	for range rounds {
		for _, sh := range shapes {
			for _, s := range services {
				r := runPeerLoad(t, admin, s.addr, sh, time.Duration(seconds)*time.Second)
				cell := fmt.Sprintf("%s/%v", s.name, sh)
				results[cell] = append(results[cell], r)
			}
		}
	}
	var b strings.Builder
	b.WriteString("| descriptors | service | requests/s | p50 | p99 | Redis CPU µs/request | Redis commands/request |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, sh := range shapes {
		for _, s := range services {
			rs := results[fmt.Sprintf("%s/%v", s.name, sh)]
			sort.Slice(rs, func(i, j int) bool { return rs[i].rate < rs[j].rate })
			r := rs[len(rs)/2]
			fmt.Fprintf(&b, "| %v | %s | %.0f | %s | %s | %.2f | %s |\n", sh, s.name, r.rate,
				r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.cpuUs, r.commands)
		}
	}
	t.Logf("64 concurrent calls, every request admitted, median of %d rounds of %ds:\n%s", rounds, seconds, b.String())
}

// startBenchPeer starts envoyproxy/ratelimit's binary on free loopback ports,
// its budgets in the redis-server at addr, with the pipeline window given
// ("0": none, its default), and returns its gRPC address once it answers.
func startBenchPeer(t *testing.T, bin, addr, window string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "ratelimit", "config", "bench.yaml"), peerConfig)
	ports := make([]string, 3)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+ports[0], "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+ports[1],
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+ports[2],
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+addr, "REDIS_PIPELINE_WINDOW="+window,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false")
	logFile, err := os.Create(filepath.Join(root, "ratelimit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	grpcAddr := "127.0.0.1:" + ports[2]
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := client.ShouldRateLimit(ctx, request("bench", desc("user", "warm-up")))
		cancel()
		if err == nil && resp.OverallCode == rlspb.RateLimitResponse_OK {
			return grpcAddr
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("envoyproxy/ratelimit exited; its log:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit does not answer on %s: %v %v", grpcAddr, resp, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a process's start, not timing anything
	}
}

// peerLoad is what one run of runPeerLoad measured.
type peerLoad struct {
	rate     float64
	p50, p99 time.Duration
	cpuUs    float64
	commands string
}

// peerShape is what the requests of a run hold: descriptors per request,
// and whether every caller sends the same one (a hot key) or keys of its
// own.
type peerShape struct {
	descriptors int
	hot         bool
}

func (s peerShape) String() string {
	if s.hot {
		return fmt.Sprintf("%d, one hot value", s.descriptors)
	}
	return strconv.Itoa(s.descriptors)
}

// runPeerLoad calls the service at addr from 64 goroutines over 8
// connections for d, after a warm-up of a tenth of d, each caller on 100
// keys of its own or all on one (shape), and measures them.
func runPeerLoad(t *testing.T, admin *redis.Client, addr string, shape peerShape, d time.Duration) peerLoad {
	const callers, conns = 64, 8
	var clients []rlspb.RateLimitServiceClient
	for range conns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, rlspb.NewRateLimitServiceClient(conn))
	}
	run := func(d time.Duration, lat [][]time.Duration) int64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(d)
		for c := range callers {
			wg.Go(func() {
				client := clients[c%conns]
				reqs := make([]*rlspb.RateLimitRequest, 100)
				for i := range reqs {
					v := strconv.Itoa(c) + "-" + strconv.Itoa(i)
					if shape.hot {
						v = "hot"
					}
					if shape.descriptors == 1 {
						reqs[i] = request("bench", desc("user", v))
					} else {
						reqs[i] = request("bench", desc("user", v), desc("route", v), desc("tenant", v))
					}
				}
				for i := 0; ; i++ {
					begin := time.Now()
					if begin.After(deadline) {
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					resp, err := client.ShouldRateLimit(ctx, reqs[i%len(reqs)])
					cancel()
					if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
						t.Errorf("caller %d: %v, %v; want every request admitted", c, resp, err)
						return
					}
					if lat != nil {
						lat[c] = append(lat[c], time.Since(begin))
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return n.Load()
	}
	run(d/10, nil)
	ctx := context.Background()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cpu := redistest.ServerCPU(t, admin)
	lat := make([][]time.Duration, callers)
	begin := time.Now()
	n := run(d, lat)
	elapsed := time.Since(begin)
	cpu = redistest.ServerCPU(t, admin) - cpu
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := peerLoad{rate: float64(n) / elapsed.Seconds(), cpuUs: cpu.Seconds() * 1e6 / float64(n)}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	r.commands = redisCommands(t, admin, n)
	return r
}

// redisCommands returns the commands Redis ran per request over n
// requests (INFO commandstats), in all and by command, the most first.
func redisCommands(t *testing.T, c *redis.Client, n int64) string {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	type stat struct {
		name  string
		calls int64
	}
	var stats []stat
	var total int64
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		switch name {
		case "info", "config|resetstat", "ping", "hello", "client|setinfo", "select", "auth":
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		k, _ := strconv.ParseInt(calls, 10, 64)
		stats = append(stats, stat{strings.ToUpper(name), k})
		total += k
	}
	sort.Slice(stats, func(i, j int) bool { return stats[i].calls > stats[j].calls })
	parts := make([]string, len(stats))
	for i, s := range stats {
		parts[i] = fmt.Sprintf("%s %.2f", s.name, float64(s.calls)/float64(n))
	}
	return fmt.Sprintf("%.2f: %s", float64(total)/float64(n), strings.Join(parts, ", "))
}

// peerEnvInt returns the positive integer in the environment variable
// name, or def.
func peerEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q, want a positive integer", name, v)
	}
	return n
}
