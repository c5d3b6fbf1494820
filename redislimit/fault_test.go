package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// budget is the time budget the fault tests give each call, and slack what
// they allow on top of it for scheduling on a loaded machine under -race.
const (
	budget = 200 * time.Millisecond
	slack  = 300 * time.Millisecond
)

// timedTake calls Take and measures it.
func timedTake(ctx context.Context, l *redislimit.Limiter, key string) (keyrate.Decision, error, time.Duration) {
	start := time.Now()
	d, err := l.TakeContext(ctx, key, 1)
	return d, err, time.Since(start)
}

// expectFailFast checks that calls fail with an error wrapping
// ErrUnavailable, each within the budget, and returns the first call's
// error. The first call asks Redis and opens the circuit breaker; with
// mustUseBudget it must wait out the budget and fail with
// context.DeadlineExceeded. The calls after it are not asked of Redis:
// they fail well before the budget, and their errors do not wrap
// context.DeadlineExceeded, as nothing waited.
func expectFailFast(t *testing.T, l *redislimit.Limiter, key string, calls int, mustUseBudget bool) error {
	t.Helper()
	var first error
	for i := range calls {
		d, err, took := timedTake(context.Background(), l, key)
		if err == nil {
			t.Fatalf("call %d during the outage: got %+v and no error", i, d)
		}
		if d.Allowed {
			t.Fatalf("call %d during the outage: error %v with Allowed set", i, err)
		}
		if !errors.Is(err, keyrate.ErrUnavailable) {
			t.Fatalf("call %d during the outage: %v, want an error wrapping ErrUnavailable", i, err)
		}
		if took > budget+slack {
			t.Fatalf("call %d during the outage took %v, want at most the %v budget (+%v slack): %v", i, took, budget, slack, err)
		}
		if i == 0 {
			first = err
			if mustUseBudget && (took < budget || !errors.Is(err, context.DeadlineExceeded)) {
				t.Fatalf("call %d during the outage: %v after %v, want context.DeadlineExceeded after the %v budget", i, err, took, budget)
			}
			continue
		}
		if took >= budget || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d during the outage, after the breaker opened: %v after %v, want an answer at once, not a wait", i, err, took)
		}
	}
	return first
}

// fillAfterRecovery calls Take until Redis answers again (within 10s), then
// until the key is full, and returns how many calls were admitted.
func fillAfterRecovery(t *testing.T, l *redislimit.Limiter, key string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	admitted := 0
	var lastErr error
	for time.Now().Before(deadline) {
		d, err := l.TakeContext(context.Background(), key, 1)
		if err != nil {
			lastErr = err
			time.Sleep(20 * time.Millisecond) // polling a recovering server, not timing a decision
			continue
		}
		if !d.Allowed {
			return admitted
		}
		admitted++
	}
	t.Fatalf("no recovery within 10s; last error: %v", lastErr)
	return 0
}

// checkNotOverAdmitted checks that the callers were admitted no more than
// the limit in total, and that the log the server holds is exactly full.
func checkNotOverAdmitted(t *testing.T, client *redis.Client, key string, limit, admitted int) {
	t.Helper()
	if admitted > limit {
		t.Fatalf("admitted %d in one window across the outage, want at most %d", admitted, limit)
	}
	n, err := redislimit.EventsStored(context.Background(), client, key)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(limit) {
		t.Fatalf("the log holds %d events once the key refuses, want %d", n, limit)
	}
}

// TestRedisStopped kills Redis mid-run (as a crash would), checks that
// calls fail within the budget, restarts it on the same port and data, and
// checks that the limiter recovers with the events admitted before the
// crash still counted. Redis runs with an fsync'd append-only file here:
// without persistence a restart forgets every window, which no client can
// make up for.
func TestRedisStopped(t *testing.T) {
	srv := redistest.StartT(t, "--appendonly", "yes", "--appendfsync", "always")
	client := srv.Client(t)
	const limit = 5
	l, err := redislimit.New(client, limit, 24*time.Hour, redislimit.WithPrefix("fault:"), redislimit.WithTimeout(budget))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d := mustTake(t, l, "k", 1); !d.Allowed {
			t.Fatalf("request %d before the crash: %+v", i, d)
		}
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	expectFailFast(t, l, "k", 5, false)

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	after := fillAfterRecovery(t, l, "k")
	checkNotOverAdmitted(t, client, l.StoreKey("k"), limit, 3+after)
}

// TestRedisPaused pauses Redis with CLIENT PAUSE: calls must give up at
// the budget with context.DeadlineExceeded, and once Redis resumes the
// limiter answers again without having admitted more than the limit, even
// counting the calls it gave up on, which Redis may run when it resumes.
// A WRITE pause (which holds back scripts) is lifted with CLIENT UNPAUSE; an
// ALL pause holds back UNPAUSE too, so it is given a duration and runs out.
func TestRedisPaused(t *testing.T) {
	for _, mode := range []string{"WRITE", "ALL"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.StartT(t)
			client, admin := srv.Client(t), srv.Client(t)
			ctx := context.Background()
			// A dedicated connection: a new connection's handshake would
			// itself wait out an ALL pause.
			ctl := admin.Conn()
			t.Cleanup(func() { ctl.Close() })
			const limit = 5
			l, err := redislimit.New(client, limit, 24*time.Hour, redislimit.WithPrefix("fault:"), redislimit.WithTimeout(budget))
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				mustTake(t, l, "k", 1)
			}
			pause := 30 * time.Second
			if mode == "ALL" {
				pause = 2 * time.Second // 3 calls of 200ms fit well inside it
			}
			if err := ctl.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), mode).Err(); err != nil {
				t.Fatal(err)
			}
			expectFailFast(t, l, "k", 3, true)
			if mode == "WRITE" {
				if err := ctl.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
					t.Fatal(err)
				}
			}
			after := fillAfterRecovery(t, l, "k")
			checkNotOverAdmitted(t, admin, l.StoreKey("k"), limit, 2+after)
		})
	}
}

// blackhole accepts TCP connections on loopback and never answers, like a
// Redis behind a dead network path.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestRedisUnreachable checks the budget against a server that never
// answers, with and without go-redis's own context deadlines, and against a
// port where nothing listens.
func TestRedisUnreachable(t *testing.T) {
	for _, ctxTimeouts := range []bool{true, false} {
		name := "ContextTimeoutEnabled"
		if !ctxTimeouts {
			name = "ContextTimeoutDisabled"
		}
		t.Run(name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: blackhole(t), ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { client.Close() })
			l, err := redislimit.New(client, 5, time.Hour, redislimit.WithTimeout(budget))
			if err != nil {
				t.Fatal(err)
			}
			// Connected, but no answer: a timeout, and nothing else.
			if err := expectFailFast(t, l, "k", 3, true); connRefused(err) {
				t.Errorf("a server that accepts and never answers: %v, want no connection error", err)
			}
		})
	}
	for _, ctxTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprint("Refused/ContextTimeoutEnabled=", ctxTimeouts), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close() // nothing listens there now
			client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { client.Close() })
			l, err := redislimit.New(client, 5, time.Hour, redislimit.WithTimeout(budget))
			if err != nil {
				t.Fatal(err)
			}
			// go-redis retries the dial until the budget runs out, then
			// reports the deadline alone; the Limiter says why there was no
			// answer: Redis refused the connection. The calls after it are
			// not asked, and say so, naming the refusal as the cause.
			if err := expectFailFast(t, l, "k", 3, false); !connRefused(err) {
				t.Errorf("the first call: %v, want the refused connection in the error", err)
			}
			for i := range 3 {
				_, err := l.TakeContext(context.Background(), "k", 1)
				if connRefused(err) || !strings.Contains(err.Error(), "connection refused") {
					t.Errorf("call %d after the breaker opened: %v, want the refusal named as the latest failure, not wrapped", i, err)
				}
			}
		})
	}
}

// connRefused reports whether err says that a connection was refused, as a
// dial to a port where nothing listens is.
func connRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

// TestCallerContext checks that the caller's context bounds a call as well
// as the budget does, with the caller's error rather than the budget's. A
// deadline ends the call at once on either path. Cancellation does too when
// Take waits in a goroutine; a client called directly only watches
// deadlines, so there a cancelled call ends at the budget at the latest.
func TestCallerContext(t *testing.T) {
	for _, direct := range []bool{true, false} {
		name := map[bool]string{true: "Direct", false: "Goroutine"}[direct]
		t.Run(name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: blackhole(t), ContextTimeoutEnabled: direct})
			t.Cleanup(func() { client.Close() })
			l, err := redislimit.New(client, 5, time.Hour, redislimit.WithTimeout(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err, took := timedTake(ctx, l, "k")
			if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "budget") || took > 100*time.Millisecond+slack {
				t.Fatalf("caller deadline of 100ms: %v after %v; want the caller's context.DeadlineExceeded", err, took)
			}

			wait := 50 * time.Millisecond
			if direct {
				l, err = redislimit.New(client, 5, time.Hour, redislimit.WithTimeout(budget))
				if err != nil {
					t.Fatal(err)
				}
				wait = budget
			}
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			_, err, took = timedTake(ctx, l, "k")
			if !errors.Is(err, context.Canceled) || took > wait+slack {
				t.Fatalf("caller cancelled at 50ms: %v after %v; want context.Canceled within %v", err, took, wait)
			}
		})
	}
}
