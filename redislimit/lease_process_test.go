package redislimit_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

const leaseHelperEnv = "REDISLIMIT_LEASE_HELPER"

// TestLeaseHelperProcess is not a test: run by TestLeaseProcesses as a
// replica of its own, it decides one key with leases from four goroutines
// for a while on the real clock, and prints each admission as the instant
// read before its call and how long the call took, in ns. Without
// leaseHelperEnv set it does nothing.
func TestLeaseHelperProcess(t *testing.T) {
	spec := os.Getenv(leaseHelperEnv)
	if spec == "" {
		return
	}
	f := strings.Fields(spec) // addr prefix limit runFor
	limit, _ := strconv.Atoi(f[2])
	runFor, _ := time.ParseDuration(f[3])
	client := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := redislimit.New(client, limit, time.Second, redislimit.WithPrefix(f[1]), redislimit.WithLeases(50*time.Millisecond), redislimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(runFor)
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(end) {
				t0 := time.Now()
				d, err := l.TakeContext(context.Background(), "hot", 1)
				el := time.Since(t0)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				if d.Allowed {
					mu.Lock()
					fmt.Fprintf(out, "admit %d %d\n", t0.UnixNano(), el)
					out.Flush()
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

// TestLeaseProcesses runs four replicas as OS processes on one key on the
// real clock, and kills one with SIGKILL while it holds a lease: every
// window of real time holds at most the limit of what they all admitted.
// An admission's instant is known to within its call, so windows shorter
// by twice the longest call are checked: each holds only events of a real
// window of the limit's length.
func TestLeaseProcesses(t *testing.T) {
	srv := redistest.Shared(t)
	const procs, limit = 4, 50
	prefix := uniquePrefix()
	var mu sync.Mutex
	var at []int64
	var slack int64
	var wg sync.WaitGroup
	for i := range procs {
		runFor := "1500ms"
		cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %s", leaseHelperEnv, srv.Addr(), prefix, limit, runFor))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(stdout)
			seen := 0
			for sc.Scan() {
				var t0, el int64
				if _, err := fmt.Sscanf(sc.Text(), "admit %d %d", &t0, &el); err != nil {
					continue
				}
				mu.Lock()
				at = append(at, t0)
				slack = max(slack, el)
				mu.Unlock()
				if seen++; i == 0 && seen == 20 {
					cmd.Process.Kill() // in the middle of a lease
				}
			}
			cmd.Wait()
		})
	}
	wg.Wait()
	slices.Sort(at)
	if len(at) < limit {
		t.Fatalf("%d admissions in all, want at least the limit, %d", len(at), limit)
	}
	w := int64(time.Second) - 2*slack
	for i, j := 0, 0; j < len(at); j++ {
		for at[j]-at[i] >= w {
			i++
		}
		if j-i+1 > limit {
			t.Fatalf("%d admissions within %v (a second less twice the longest call, %v), over the limit %d", j-i+1, time.Duration(w), time.Duration(slack), limit)
		}
	}
	t.Logf("%d admissions over 1.5s, the longest call %v", len(at), time.Duration(slack))
}
