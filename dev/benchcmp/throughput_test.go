package benchcmp_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// throughputEnv turns on TestThroughput, which takes a few minutes.
const throughputEnv = "KEYRATE_THROUGHPUT_TABLE"

// TestThroughput puts every contender through the same load on one local
// redis-server: C concurrent callers, each deciding keys of its own in
// turn (100 per caller) under a limit no run reaches, so that every call
// is admitted and recorded, for C of 1, 32 and 128. Each cell runs for
// KEYRATE_THROUGHPUT_SECONDS (2 by default) after a warm-up, in
// KEYRATE_THROUGHPUT_ROUNDS rounds (3 by default) that take the
// contenders in turn, and the table gives each cell's median round:
// decisions per second, each call's latency (p50, p99), the server's CPU
// time per decision (INFO cpu, user and system), the commands Redis ran
// per decision (INFO commandstats, those run inside scripts included:
// every command of a decision, counted where it runs) and the script's
// own time per decision (the usec of EVALSHA and EVAL over the
// decisions). Run it with KEYRATE_THROUGHPUT_TABLE=1; it prints a
// Markdown table.
func TestThroughput(t *testing.T) {
	if os.Getenv(throughputEnv) == "" {
		t.Skipf("set %s=1 to measure throughput (a few minutes)", throughputEnv)
	}
	seconds := envInt(t, "KEYRATE_THROUGHPUT_SECONDS", 2)
	rounds := envInt(t, "KEYRATE_THROUGHPUT_ROUNDS", 3)
	only := os.Getenv("KEYRATE_THROUGHPUT_LIBS") // comma-separated names; "": all
	addr := redistest.StartT(t).Addr()
	callers := []int{1, 32, 128}
	var libs []contender
	for _, c := range contenders {
		if c.name == "keyrate-SlidingLog-DenyCache" { // the same as keyrate-SlidingLog when every call is admitted
			continue
		}
		if only == "" || slices.Contains(strings.Split(only, ","), c.name) {
			libs = append(libs, c)
		}
	}
	results := map[string][]load{}
	for round := range rounds {
		for _, c := range callers {
			for _, lib := range libs {
				client := newClient(t, addr)
				allow := lib.new(t, client, 1_000_000_000, time.Minute)
				r := runLoad(t, client, allow, c, time.Duration(seconds)*time.Second, fmt.Sprintf("r%d-", round))
				cell := fmt.Sprintf("%s/%d", lib.name, c)
				results[cell] = append(results[cell], r)
				client.Close()
			}
		}
	}
	var b strings.Builder
	b.WriteString("| callers | library | decisions/s | p50 | p99 | server µs/decision | commands/decision | script µs/decision |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |\n")
	for _, c := range callers {
		for _, lib := range libs {
			rs := results[fmt.Sprintf("%s/%d", lib.name, c)]
			sort.Slice(rs, func(i, j int) bool { return rs[i].rate < rs[j].rate })
			r := rs[len(rs)/2]
			fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %.1f | %s | %.1f |\n", c, lib.name, r.rate,
				r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.serverUs, r.commands, r.scriptUs)
		}
	}
	t.Logf("callers on distinct keys, every call admitted, median of %d rounds of %ds:\n%s", rounds, seconds, b.String())
}

// load is what one run of runLoad measured.
type load struct {
	rate     float64 // decisions per second
	p50, p99 time.Duration
	serverUs float64 // server CPU µs per decision
	scriptUs float64 // µs inside EVALSHA and EVAL per decision
	commands string  // commands per decision, in all and the largest
}

// runLoad runs callers goroutines calling allow for d, each on 100 keys of
// its own (named from prefix), after a warm-up of a tenth of d, and
// measures them.
func runLoad(t *testing.T, client *redis.Client, allow allowFunc, callers int, d time.Duration, prefix string) load {
	ctx := context.Background()
	run := func(d time.Duration, lat [][]time.Duration) int64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(d)
		for c := range callers {
			wg.Go(func() {
				keys := make([]string, 100)
				for i := range keys {
					keys[i] = prefix + strconv.Itoa(c) + "-" + strconv.Itoa(i)
				}
				for i := 0; ; i++ {
					begin := time.Now()
					if begin.After(deadline) {
						return
					}
					ok, err := allow(ctx, keys[i%len(keys)])
					if err != nil || !ok {
						t.Errorf("caller %d: allowed %v, %v; want every call admitted", c, ok, err)
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
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cpu := redistest.ServerCPU(t, client)
	lat := make([][]time.Duration, callers)
	begin := time.Now()
	n := run(d, lat)
	elapsed := time.Since(begin)
	cpu = redistest.ServerCPU(t, client) - cpu
	stats := commandStats(t, client)
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := load{rate: float64(n) / elapsed.Seconds(), serverUs: cpu.Seconds() * 1e6 / float64(n)}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	var total int64
	var parts []string
	names := make([]string, 0, len(stats))
	for name := range stats {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return stats[names[i]].calls > stats[names[j]].calls })
	for _, name := range names {
		s := stats[name]
		switch name {
		case "info", "config|resetstat", "config", "ping", "hello", "client|setinfo", "client", "select", "auth":
			continue
		case "evalsha", "eval":
			r.scriptUs += float64(s.usec) / float64(n)
		}
		total += s.calls
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(name), float64(s.calls)/float64(n)))
	}
	r.commands = fmt.Sprintf("%.2f: %s", float64(total)/float64(n), strings.Join(parts, ", "))
	return r
}

// commandStat is one command's line of INFO commandstats.
type commandStat struct{ calls, usec int64 }

// commandStats returns INFO commandstats by command name.
func commandStats(tb testing.TB, client *redis.Client) map[string]commandStat {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	stats := map[string]commandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s commandStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return stats
}

// envInt returns the integer in the environment variable name, or def.
func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q, want a positive integer", name, v)
	}
	return n
}
