package redislimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyrate/keyrate/redislimit/redistest"
)

// BenchmarkScriptTime runs the sliding log's scripts over prepared keys
// and reports the server's time inside them per decision (script-µs/op:
// the usec of EVALSHA in INFO commandstats over the decisions), every
// decision admitted, each run sent alone by one client: a run of one
// request (Lone, as a lone caller's), 50 requests on distinct keys (Batch,
// as under 128 callers), one request of three keys (TakeAll3, as
// keyrate-rls's three descriptors from one caller) and ten of them
// (Batch10TakeAll3, as under many callers); each by the script the
// Limiter uses and by the batch script's code without the fast path
// (General), side by side in one run. Keys cycle through 10 per place in
// a run, a minute's window and a limit no run reaches, each first decided
// 64 times; a Young shape instead gives each place fresh keys every 16
// decisions of a key, from the key's first: the long tail of a service's
// keys, whose logs are still growing out of their buffer (new at the 1st
// decision, rewritten larger at the 5th and the 14th).
func BenchmarkScriptTime(b *testing.B) {
	client := redistest.Shared(b).Client(b)
	ctx := context.Background()
	l, err := New(client, 1_000_000_000, time.Minute, WithPrefix("scripttime:"))
	if err != nil {
		b.Fatal(err)
	}
	tr := l.tiers.Load().def
	shapes := []struct {
		name      string
		reqs, per int // requests per run, keys per request
		life      int // decisions of a key before its place takes a fresh one; 0: every key prepared, and kept
	}{{"Lone", 1, 1, 0}, {"LoneYoung", 1, 1, 16}, {"Batch50", 50, 1, 0}, {"TakeAll3", 1, 3, 0}, {"Batch10TakeAll3", 10, 3, 0}, {"Batch10TakeAll3Young", 10, 3, 16}}
	general := decisionScript(slidingLogRing + slidingLogSource)
	for _, shape := range shapes {
		for _, alt := range []string{"", "/General"} {
			b.Run(shape.name+alt, func(b *testing.B) {
				script := l.scriptFor(make([]*request, shape.reqs))
				if alt != "" {
					script = general
				}
				if err := client.FlushDB(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				run := func(i int) {
					reqs := make([]*request, shape.reqs)
					for j := range reqs {
						r := &request{}
						for k := range shape.per {
							key := "st{x}" + strconv.Itoa((j*shape.per+k)*10+i%10)
							if shape.life > 0 {
								key += "-" + strconv.Itoa(i/(10*shape.life))
							}
							r.keys = append(r.keys, key)
							r.weights = append(r.weights, 1)
							r.tiers = append(r.tiers, tr)
						}
						reqs[j] = r
					}
					keys, args := l.runArgs(reqs)
					if err := script.Run(ctx, client, keys, args...).Err(); err != nil {
						b.Fatal(err)
					}
				}
				if shape.life == 0 {
					for i := range 640 { // every key past its first decisions, which grow its ring
						run(i)
					}
				}
				if err := client.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := range b.N {
					run(i)
				}
				b.StopTimer()
				b.ReportMetric(float64(evalUsec(b, client))/float64(b.N*shape.reqs), "script-µs/op")
			})
		}
	}
}

// evalUsec returns the usec of EVALSHA and EVAL in INFO commandstats.
func evalUsec(tb testing.TB, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var usec int64
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || name != "cmdstat_evalsha" && name != "cmdstat_eval" {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if k, v, _ := strings.Cut(f, "="); k == "usec" {
				n, _ := strconv.ParseInt(v, 10, 64)
				usec += n
			}
		}
	}
	return usec
}
