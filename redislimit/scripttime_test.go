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
// as under 128 callers) and one request of three keys (TakeAll3, as
// keyrate-rls's three descriptors); each by the script the Limiter uses
// and by the batch script's code without the fast path (General), side by
// side in one run. Keys cycle through 10 per place in a run, a minute's
// window and a limit no run reaches.
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
	}{{"Lone", 1, 1}, {"Batch50", 50, 1}, {"TakeAll3", 1, 3}}
	general := decisionScript(slidingLogSource)
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
							r.keys = append(r.keys, "st{x}"+strconv.Itoa((j*shape.per+k)*10+i%10))
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
				for i := range 640 { // every key past its first decisions, which grow its ring
					run(i)
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
