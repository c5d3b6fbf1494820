package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
	"github.com/keyrate/keyrate/middleware"
)

// goneContexts returns 10 cancelled contexts and 10 whose deadline has
// passed, each from the same peer: calls whose client has reset the
// stream, or timed out, before they were decided.
func goneContexts(t *testing.T, from context.Context) []context.Context {
	var ctxs []context.Context
	for range 10 {
		ctx, cancel := context.WithCancel(from)
		cancel()
		ctxs = append(ctxs, ctx)
	}
	for range 10 {
		ctx, cancel := context.WithDeadline(from, time.Now().Add(-time.Millisecond))
		t.Cleanup(cancel)
		ctxs = append(ctxs, ctx)
	}
	return ctxs
}

// viaGoroutine hides that the limiter is Bounded, so that the Limiter calls
// it on a goroutine under its time budget, as it calls a store.
type viaGoroutine struct{ l *keyrate.Limiter }

func (b viaGoroutine) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return b.l.TakeContext(ctx, key, n)
}

// A call whose context is already done is never served and never decided,
// in either failure mode, in shadow mode too, whether the backend is
// called inline or on a goroutine: it fails with its context's own status.
// Of 10 cancelled calls, 10 expired ones and one live one at a limit of 1,
// the handler runs exactly once, for the live one, which comes last.
func TestGoneClientNeverServed(t *testing.T) {
	from := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}})
	info := &grpc.UnaryServerInfo{FullMethod: check}
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		for _, shadow := range []bool{false, true} {
			for bname, backend := range map[string]func(*keyrate.Limiter) keyrate.Backend{
				"inline":    func(l *keyrate.Limiter) keyrate.Backend { return l },
				"goroutine": func(l *keyrate.Limiter) keyrate.Backend { return viaGoroutine{l} },
			} {
				t.Run(fmt.Sprintf("mode=%d/shadow=%v/%s", mode, shadow, bname), func(t *testing.T) {
					l, _ := manualLimiter(t, 1, time.Minute)
					var errs []error
					opts := []grpclimit.Option{grpclimit.WithFailureMode(mode),
						grpclimit.WithOnError(func(ev middleware.Event) { errs = append(errs, ev.Err) })}
					if shadow {
						opts = append(opts, grpclimit.WithShadow())
					}
					unary := mustNew(t, backend(l), opts...).Unary()
					served := 0
					handler := func(ctx context.Context, req any) (any, error) { served++; return "ok", nil }
					for i, ctx := range goneContexts(t, from) {
						want := codes.Canceled
						if i >= 10 {
							want = codes.DeadlineExceeded
						}
						if _, err := unary(ctx, nil, info, handler); status.Code(err) != want {
							t.Errorf("gone call %d: %v, want %v", i, err, want)
						}
					}
					if _, err := unary(from, nil, info, handler); err != nil {
						t.Errorf("live call: %v, want it served", err)
					}
					if served != 1 {
						t.Errorf("the handler ran %d times, want once", served)
					}
					if len(errs) != 20 {
						t.Fatalf("OnError heard of %d calls, want 20", len(errs))
					}
					for i, err := range errs {
						want := context.Canceled
						if i >= 10 {
							want = context.DeadlineExceeded
						}
						if !errors.Is(err, middleware.ErrClientGone) || !errors.Is(err, want) {
							t.Errorf("OnError got %v for gone call %d, want ErrClientGone and %v", err, i, want)
						}
					}
				})
			}
		}
	}
}

// A store still busy when the call's deadline passes is not waited for:
// the call ends at its deadline with DeadlineExceeded, unserved, whether
// the store then admits it or fails, in either failure mode.
func TestGoneClientSlowStore(t *testing.T) {
	for _, admits := range []bool{true, false} {
		for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
			t.Run(fmt.Sprintf("admits=%v/mode=%d", admits, mode), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					store := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
						time.Sleep(50 * time.Millisecond) // ignoring ctx, as a store may
						if admits {
							return keyrate.Decision{Allowed: true, Limit: 3, Remaining: 2}, nil
						}
						return keyrate.Decision{}, errors.New("store down")
					})
					obs := &recordingObserver{}
					unary := mustNew(t, store, grpclimit.WithFailureMode(mode), grpclimit.WithObserver(obs)).Unary()
					served := 0
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
					defer cancel()
					start := time.Now()
					_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: check}, func(context.Context, any) (any, error) {
						served++
						return nil, nil
					})
					if took := time.Since(start); took != 5*time.Millisecond || served != 0 || status.Code(err) != codes.DeadlineExceeded {
						t.Errorf("after %v: %v, handler ran %d times; want DeadlineExceeded after 5ms, unserved", took, err, served)
					}
					if got := obs.String(); got != check+" error "+middleware.ErrClientGone.Error()+": context deadline exceeded; " {
						t.Errorf("observer saw %q", got)
					}
					time.Sleep(time.Second) // let the store's goroutine end
				})
			})
		}
	}
}

// slowWhenAsked stands in for a store that answers only when the call's
// context ends, for calls that carry the metadata slow=1, and is the
// limiter it wraps for the others.
type slowWhenAsked struct{ *keyrate.Limiter }

func (s slowWhenAsked) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	if v := metadata.ValueFromIncomingContext(ctx, "slow"); len(v) > 0 {
		<-ctx.Done()
		return keyrate.Decision{}, ctx.Err()
	}
	return s.Limiter.TakeContext(ctx, key, n)
}

// On a real server, calls whose client deadline passes while the store is
// busy never reach the handler, in either failure mode; the one live call
// does.
func TestGoneClientOnServer(t *testing.T) {
	for _, mode := range []middleware.FailureMode{middleware.FailOpen, middleware.FailClosed} {
		t.Run(fmt.Sprint("mode=", mode), func(t *testing.T) {
			l, _ := manualLimiter(t, 1, time.Minute)
			var mu sync.Mutex
			var errs []error
			reported := make(chan struct{}, 20)
			ts := serve(t, mustNew(t, slowWhenAsked{l}, grpclimit.WithFailureMode(mode),
				grpclimit.WithOnError(func(ev middleware.Event) {
					mu.Lock()
					errs = append(errs, ev.Err)
					mu.Unlock()
					reported <- struct{}{}
				})))
			c := ts.client(t, "127.0.0.1")
			for i := range 10 {
				// Long enough to reach the server on a busy machine, where
				// the store then holds the call until its deadline passes.
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "slow", "1"), 100*time.Millisecond)
				_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
				cancel()
				if status.Code(err) != codes.DeadlineExceeded {
					t.Errorf("call %d: %v, want DeadlineExceeded", i, err)
				}
			}
			wait := time.After(10 * time.Second)
			for i := range 10 {
				select {
				case <-reported:
				case <-wait:
					t.Fatalf("%d of the 10 calls reached the server and were reported to OnError", i)
				}
			}
			if res := callCheck(t, c); res.code != codes.OK {
				t.Errorf("live call: %v %s, want OK", res.code, res.msg)
			}
			// Every call has been decided or failed; a handler a failed call
			// might have reached would have run by now on the server's
			// goroutine for that call, before the client heard back: stop
			// the server and wait for its handlers, to be sure.
			ts.stop()
			if got := ts.served.Load(); got != 1 {
				t.Errorf("the handler ran %d times, want once", got)
			}
			mu.Lock()
			defer mu.Unlock()
			for i, err := range errs {
				// The server cancels a call whose client has given up as
				// soon as it hears so, before its own copy of the deadline.
				if !errors.Is(err, middleware.ErrClientGone) || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Errorf("OnError got %v for call %d, want ErrClientGone and the call's context's error", err, i)
				}
			}
		})
	}
}
