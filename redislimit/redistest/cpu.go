package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerCPU returns the CPU time the server c talks to has used since it
// started, user and system (INFO cpu). Its difference over a run, per
// decision, is what a decision costs the server: that bounds how many a
// server can decide per second, which the client's wall time, shared with
// a benchmark's own goroutines on a small machine, blurs.
func ServerCPU(tb testing.TB, c *redis.Client) time.Duration {
	tb.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			s, err := strconv.ParseFloat(value, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += time.Duration(s * float64(time.Second))
		}
	}
	return total
}
