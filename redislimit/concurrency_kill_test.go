package redislimit_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// TestConcurrencyHelperProcess is not a test: run by
// TestConcurrencyReplicaKilled as a separate OS process, a replica that
// takes every slot of a key, says so, and holds them, renewing their
// leases, until it is killed (or a minute passes). Without helperEnv set
// to its spec it does nothing.
func TestConcurrencyHelperProcess(t *testing.T) {
	spec, ok := strings.CutPrefix(os.Getenv(helperEnv), "slots ")
	if !ok {
		return
	}
	// spec: addr prefix key limit ttl
	f := strings.Fields(spec)
	limit, _ := strconv.Atoi(f[3])
	ttl, _ := time.ParseDuration(f[4])
	client := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true})
	defer client.Close()
	c, err := redislimit.NewConcurrency(client, limit, ttl, redislimit.WithPrefix(f[1]))
	if err != nil {
		t.Fatal(err)
	}
	for range limit {
		if _, ok, err := c.TryAcquire(context.Background(), f[2]); !ok || err != nil {
			t.Fatalf("helper: a slot: %v %v", ok, err)
		}
	}
	fmt.Printf("\nhelper: holding %d\n", limit)
	time.Sleep(time.Minute) // the parent kills it long before
}

// A replica holding every slot of a key is killed with SIGKILL, as a
// crash would end it: it gives nothing back, and its slots come back to
// the other replicas within the leases' time to live, on their own. While
// it lived, its renewals kept the slots its own for longer than that.
func TestConcurrencyReplicaKilled(t *testing.T) {
	srv := redistest.Shared(t)
	const limit, ttl = 3, 1500 * time.Millisecond
	prefix := uniquePrefix()
	cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrencyHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=slots %s %s k %d %v", helperEnv, srv.Addr(), prefix, limit, ttl))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if lines.Text() == fmt.Sprintf("helper: holding %d", limit) {
				ready <- nil
				return
			}
		}
		ready <- fmt.Errorf("the helper ended without holding its slots: %v", lines.Err())
	}()
	select {
	case err := <-ready:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the helper did not take its slots within 30s")
	}

	c := newSlots(t, srv.Client(t), limit, ttl, redislimit.WithPrefix(prefix))
	ctx := context.Background()
	for until := time.Now().Add(2 * ttl); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		_, ok, err := c.TryAcquire(ctx, "k")
		require.NoError(t, err)
		require.False(t, ok, "the live helper's renewed leases hold every slot")
	}

	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no release, no renewal, nothing
	cmd.Wait()
	killed := time.Now()
	_, ok, err := c.TryAcquire(ctx, "k")
	require.NoError(t, err)
	assert.False(t, ok, "just killed, its leases are still live")

	within, cancel := context.WithDeadline(ctx, killed.Add(ttl+time.Second))
	defer cancel()
	_, err = c.Acquire(within, "k")
	require.NoError(t, err, "a slot comes back within the time to live")
	t.Logf("a slot came back %v after the kill (time to live %v)", time.Since(killed).Round(time.Millisecond), ttl)
	for range limit - 1 {
		_, ok, err := c.TryAcquire(ctx, "k")
		require.NoError(t, err)
		assert.True(t, ok, "every slot of the dead replica came back")
	}
}
