package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestReplicasShareOneBudget is the distributed story, for real: two demo
// processes on one redis-server, and keyrate-load spreading its requests
// over both, each identity visiting both in turn. With -redis the two
// replicas hold exactly the limit per identity between them; without it,
// each keeps its own budget, so every identity gets twice the limit
// through, which is why replicas need a shared store.
func TestReplicasShareOneBudget(t *testing.T) {
	redis := startRedis(t)
	demo := build(t, "dev/cmd/keyrate-demo")
	load := build(t, "cmd/keyrate-load")

	// /api/burst allows 10 per 10 s; 2 s of 40 requests/s from 2
	// identities sends each of them 40, 20 to each replica.
	const identities = 2
	runLoad := func(t *testing.T, urls ...string) (string, int) {
		t.Helper()
		args := []string{"-rate", "40", "-duration", "2s", "-key-count", fmt.Sprint(identities)}
		for _, u := range urls {
			args = append(args, "-url", u+"/api/burst")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, load, args...).CombinedOutput()
		code := 0
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("keyrate-load: %v\n%s", err, out)
		}
		return string(out), code
	}

	t.Run("with Redis", func(t *testing.T) {
		a := runDemo(t, demo, "-redis", redis)
		b := runDemo(t, demo, "-redis", redis)
		out, code := runLoad(t, a, b)
		if code != 0 {
			t.Errorf("keyrate-load exited %d, want 0 (completed, limit held)", code)
		}
		for i := 1; i <= identities; i++ {
			if line := identityLine(out, fmt.Sprintf("load-%d", i)); !strings.Contains(line, "held exactly 10 per 10 s") {
				t.Errorf("load-%d: %q, want held exactly 10 per 10 s", i, line)
			}
		}
		if t.Failed() {
			t.Logf("keyrate-load:\n%s", out)
		}
	})

	t.Run("in process", func(t *testing.T) {
		a := runDemo(t, demo)
		b := runDemo(t, demo)
		out, code := runLoad(t, a, b)
		if code != 3 {
			t.Errorf("keyrate-load exited %d, want 3 (an excess)", code)
		}
		for i := 1; i <= identities; i++ {
			if line := identityLine(out, fmt.Sprintf("load-%d", i)); !strings.Contains(line, "EXCESS: 20 admitted within 10 s, 10 over the limit of 10") {
				t.Errorf("load-%d: %q, want 20 admitted, 10 by each replica", i, line)
			}
		}
		if t.Failed() {
			t.Logf("keyrate-load:\n%s", out)
		}
	})
}

// identityLine returns the line of keyrate-load's report for one identity.
func identityLine(report, identity string) string {
	for line := range strings.Lines(report) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == identity {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
