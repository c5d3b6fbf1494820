package upstream_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit/upstream"
)

// upstreamServer is an HTTP handler, served in process (memoryNet), that
// stamps every request it gets with the test's clock and answers as answer
// says (200 by default).
type upstreamServer struct {
	URL    string
	clock  keyrate.Clock
	start  time.Time // the clock's instant when the server was made
	mu     sync.Mutex
	stamps []time.Duration // since start, in arrival order
	bodies []string
	answer func(n int, w http.ResponseWriter)
}

func newUpstream(t *testing.T, clock keyrate.Clock, answer func(n int, w http.ResponseWriter)) *upstreamServer {
	u := &upstreamServer{clock: clock, start: clock.Now(), answer: answer}
	u.URL = listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.stamps = append(u.stamps, u.clock.Now().Sub(u.start))
		u.bodies = append(u.bodies, string(body))
		n, answer := len(u.stamps), u.answer
		u.mu.Unlock()
		if answer != nil {
			answer(n, w)
		}
	}))
	return u
}

// setAnswer changes how the server answers the requests to come.
func (u *upstreamServer) setAnswer(answer func(n int, w http.ResponseWriter)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.answer = answer
}

func (u *upstreamServer) arrivals() []time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Sorted(slices.Values(u.stamps))
}

// viaBackendFunc hides that the limiter is a *keyrate.Limiter, so that
// the Transport takes and sleeps RetryAfter, as for any other backend.
func viaBackendFunc(l *keyrate.Limiter) keyrate.Backend {
	return backend.Func(l.TakeContext)
}

func fetch(t *testing.T, client *http.Client, url string) (int, error) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Twelve calls under 5 a second take 2 seconds, and the upstream never
// sees 6 within a second, whether the calls come one after another or all
// at once, on a *keyrate.Limiter (WaitN) or any other backend (Take, then
// RetryAfter).
func TestTransportHoldsCallsToTheBudget(t *testing.T) {
	for _, backend := range []string{"Limiter", "BackendFunc"} {
		for _, concurrent := range []bool{false, true} {
			name := backend + "/sequential"
			if concurrent {
				name = backend + "/concurrent"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					clock := newBubbleClock()
					l, err := keyrate.New(5, time.Second, keyrate.WithClock(clock))
					require.NoError(t, err)
					defer l.Close()
					var b keyrate.Backend = l
					if backend == "BackendFunc" {
						b = viaBackendFunc(l)
					}
					up := newUpstream(t, clock, nil)
					client := &http.Client{Transport: mustTransport(t, nil, b, upstream.WithClock(clock))}
					call := func() {
						code, err := fetch(t, client, up.URL)
						assert.NoError(t, err)
						assert.Equal(t, http.StatusOK, code)
					}
					if concurrent {
						calls := make([]func(), 12)
						for i := range calls {
							calls[i] = call
						}
						run(calls...)
					} else {
						run(func() {
							for range 12 {
								call()
							}
						})
					}
					at := up.arrivals()
					require.Len(t, at, 12)
					for i := 5; i < len(at); i++ {
						assert.GreaterOrEqual(t, at[i]-at[i-5], time.Second, "6 calls within a second: %v", at)
					}
					assert.Equal(t, 2*time.Second, at[11]-at[0], "12 calls under 5 a second take 2s: %v", at)
				})
			})
		}
	}
}

// A 429 or 503 with a Retry-After, in seconds or as an HTTP date, pauses
// the upstream for every caller of the Transport: the next call arrives no
// sooner than that. The 429 itself is returned to its caller.
func TestTransportPausesOnRetryAfter(t *testing.T) {
	for name, refusal := range map[string]func(w http.ResponseWriter, clock keyrate.Clock){
		"429 seconds": func(w http.ResponseWriter, _ keyrate.Clock) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		"503 seconds": func(w http.ResponseWriter, _ keyrate.Clock) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		},
		"429 date": func(w http.ResponseWriter, clock keyrate.Clock) {
			now := clock.Now()
			w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
			w.Header().Set("Retry-After", now.Add(time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := newBubbleClock()
				l, err := keyrate.New(100, time.Second, keyrate.WithClock(clock))
				require.NoError(t, err)
				defer l.Close()
				up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
					if n == 1 {
						refusal(w, clock)
					}
				})
				client := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock))}
				var codes []int
				var mu sync.Mutex
				call := func() {
					code, err := fetch(t, client, up.URL)
					assert.NoError(t, err)
					mu.Lock()
					codes = append(codes, code)
					mu.Unlock()
				}
				run(call)
				require.Len(t, codes, 1)
				assert.NotEqual(t, http.StatusOK, codes[0], "the refusal reaches its caller, not retried")
				run(call, call, call) // three callers share the pause
				at := up.arrivals()
				require.Len(t, at, 4)
				for _, a := range at[1:] {
					assert.GreaterOrEqual(t, a-at[0], time.Second, "a call arrived within the pause: %v", at)
				}
				assert.Equal(t, time.Second, at[1]-at[0])
			})
		})
	}
}

// What the upstream says is left holds the Transport to it: with 2 left
// until a reset 10 seconds on, the third call after waits for the reset;
// with none left, as X-RateLimit-Remaining: 0 and a Unix time in
// X-RateLimit-Reset say, every call waits for the reset.
func TestTransportHeedsWhatIsLeft(t *testing.T) {
	for name, tc := range map[string]struct {
		header func(h http.Header, now time.Time)
		want   []time.Duration
	}{
		"RateLimit": {func(h http.Header, _ time.Time) {
			h.Set("RateLimit", `"day";r=500;t=3600, "minute";r=2;t=10`)
		}, []time.Duration{0, 0, 0, 10 * time.Second}},
		"RateLimit-Remaining": {func(h http.Header, _ time.Time) {
			h.Set("RateLimit-Remaining", "1")
			h.Set("RateLimit-Reset", "5")
		}, []time.Duration{0, 0, 5 * time.Second, 5 * time.Second}},
		"X-RateLimit unix time": {func(h http.Header, now time.Time) {
			h.Set("Date", now.UTC().Format(http.TimeFormat))
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(30*time.Second).Unix(), 10))
		}, []time.Duration{0, 30 * time.Second, 30 * time.Second, 30 * time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := newBubbleClock()
				l, err := keyrate.New(100, time.Second, keyrate.WithClock(clock))
				require.NoError(t, err)
				defer l.Close()
				up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
					if n == 1 {
						tc.header(w.Header(), clock.Now())
					}
				})
				client := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock))}
				run(func() {
					for range 4 {
						_, err := fetch(t, client, up.URL)
						assert.NoError(t, err)
					}
				})
				assert.Equal(t, tc.want, up.arrivals())
			})
		})
	}
}

// A call waiting for its budget stops at once when its context is
// cancelled, and one whose deadline comes before its turn does not wait
// at all; neither reaches the upstream.
func TestTransportStopsAtTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBubbleClock()
		l, err := keyrate.New(1, time.Minute, keyrate.WithClock(clock))
		require.NoError(t, err)
		defer l.Close()
		up := newUpstream(t, clock, nil)
		client := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock))}
		_, err = fetch(t, client, up.URL)
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", up.URL, nil)
		errs := make(chan error, 1)
		go func() {
			_, err := client.Do(req)
			errs <- err
		}()
		synctest.Wait()
		require.Equal(t, int64(1), clock.waits.Load(), "the call waits for its budget")
		cancel()
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled call still waits")
		}
		assert.Equal(t, up.start, clock.Now(), "no time passed")

		short, cancelShort := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelShort()
		req, _ = http.NewRequestWithContext(short, "GET", up.URL, nil)
		_, err = client.Do(req)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "a minute's wait does not fit 10s")
		assert.Len(t, up.arrivals(), 1)
	})
}

func TestTransportFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBubbleClock()
		l, err := keyrate.New(1, time.Minute, keyrate.WithClock(clock))
		require.NoError(t, err)
		defer l.Close()
		up := newUpstream(t, clock, nil)
		client := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock), upstream.WithFailFast())}
		_, err = fetch(t, client, up.URL)
		require.NoError(t, err)
		_, err = fetch(t, client, up.URL)
		var limited *upstream.LimitedError
		require.ErrorAs(t, err, &limited)
		assert.Equal(t, time.Minute, limited.RetryAfter)
		assert.Len(t, up.arrivals(), 1)
		assert.Zero(t, clock.waits.Load(), "nothing waited")
	})
}

// WithRetries sends an idempotent request again once the pause its 429
// asked for is over, up to the count; a POST gets its 429.
func TestTransportRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBubbleClock()
		l, err := keyrate.New(100, time.Second, keyrate.WithClock(clock))
		require.NoError(t, err)
		defer l.Close()
		up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
			if n <= 2 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
		client := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock), upstream.WithRetries(2))}
		run(func() {
			req, _ := http.NewRequest("PUT", up.URL, strings.NewReader("same body"))
			resp, err := client.Do(req)
			if assert.NoError(t, err) {
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode, "served on the third try")
			}
		})
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, up.arrivals())
		up.mu.Lock()
		assert.Equal(t, []string{"same body", "same body", "same body"}, up.bodies)
		up.mu.Unlock()

		up.setAnswer(func(n int, w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		run(func() {
			resp, err := client.Post(up.URL, "text/plain", strings.NewReader("order"))
			if assert.NoError(t, err) {
				resp.Body.Close()
				assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "a POST is never sent twice")
			}
		})
		assert.Len(t, up.arrivals(), 4)
	})
}

func TestTransportErrors(t *testing.T) {
	l, err := keyrate.New(1, time.Minute)
	require.NoError(t, err)
	defer l.Close()
	up := newUpstream(t, keyrate.NewManualClock(t0), nil)
	for name, opts := range map[string]struct {
		b    keyrate.Backend
		opts []upstream.Option
	}{
		"nil backend":   {nil, nil},
		"nil key":       {l, []upstream.Option{upstream.WithUpstreamKey(nil)}},
		"nil clock":     {l, []upstream.Option{upstream.WithClock(nil)}},
		"11 retries":    {l, []upstream.Option{upstream.WithRetries(11)}},
		"-1 retries":    {l, []upstream.Option{upstream.WithRetries(-1)}},
		"0 max pause":   {l, []upstream.Option{upstream.WithMaxPause(0)}},
		"-1s max pause": {l, []upstream.Option{upstream.WithMaxPause(-time.Second)}},
	} {
		tr, err := upstream.NewTransport(nil, opts.b, opts.opts...)
		assert.ErrorIs(t, err, keyrate.ErrConfig, name)
		assert.Nil(t, tr, name)
	}
	tr := mustTransport(t, nil, l, upstream.WithUpstreamKey(func(*http.Request) string { return "" }))
	body := &closeCounter{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest("POST", up.URL, body)
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, keyrate.ErrInvalidKey)
	assert.True(t, body.closed, "the body of a request not sent is closed")
	req, _ = http.NewRequest("GET", up.URL, nil)

	failing := backend.Func(func(context.Context, string, int) (keyrate.Decision, error) {
		return keyrate.Decision{}, keyrate.ErrUnavailable
	})
	_, err = mustTransport(t, nil, failing).RoundTrip(req)
	assert.ErrorIs(t, err, keyrate.ErrUnavailable, "a store that cannot answer sends nothing")
	assert.Empty(t, up.arrivals())
}

// closeCounter is a request body that says whether it was closed.
type closeCounter struct {
	io.Reader
	closed bool
}

func (c *closeCounter) Close() error { c.closed = true; return nil }

// Upstreams are held apart: by host, by default, or by the key a
// function gives.
func TestTransportKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBubbleClock()
		l, err := keyrate.New(1, time.Minute, keyrate.WithClock(clock))
		require.NoError(t, err)
		defer l.Close()
		a, b := newUpstream(t, clock, nil), newUpstream(t, clock, nil)
		client := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock), upstream.WithFailFast())}
		for _, u := range []string{a.URL, b.URL} {
			_, err := fetch(t, client, u)
			assert.NoError(t, err, "each host has its own budget")
		}
		_, err = fetch(t, client, a.URL)
		assert.True(t, errors.As(err, new(*upstream.LimitedError)))

		byAccount := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock), upstream.WithFailFast(),
			upstream.WithUpstreamKey(func(r *http.Request) string { return "acct:" + r.Header.Get("X-Account") }))}
		for _, acct := range []string{"1", "2"} {
			req, _ := http.NewRequest("GET", a.URL, nil)
			req.Header.Set("X-Account", acct)
			resp, err := byAccount.Do(req)
			if assert.NoError(t, err, "account %s", acct) {
				resp.Body.Close()
			}
		}
	})
}

// mustTransport returns NewTransport's RoundTripper, failing t on an
// error; a nil base is the in-process one (inMemory).
func mustTransport(t testing.TB, base http.RoundTripper, b keyrate.Backend, opts ...upstream.Option) http.RoundTripper {
	t.Helper()
	if base == nil {
		base = inMemory{}
	}
	tr, err := upstream.NewTransport(base, b, opts...)
	require.NoError(t, err)
	return tr
}
