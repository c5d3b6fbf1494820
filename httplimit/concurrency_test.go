package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

func newConcurrency(t *testing.T, limit int, tier func(string) string, tiers map[string]int) *keyrate.Concurrency {
	t.Helper()
	c, err := keyrate.NewConcurrency(limit, tier, tiers)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// blocking is a handler that holds each request until it is let go, and
// says when one has started.
type blocking struct {
	started chan struct{}
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.started <- struct{}{}
	<-b.release
	w.Write([]byte("done"))
}

// serveAsync serves a request on its own goroutine; the recorder is ready
// once done is closed.
func serveAsync(h http.Handler, r *http.Request) (rec *httptest.ResponseRecorder, done chan struct{}) {
	rec, done = httptest.NewRecorder(), make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, r)
	}()
	return rec, done
}

// A route holding 2 requests in flight: the third, while two run, is
// refused at once with 429, a Retry-After of a second and the in-flight
// policy named in its fields and body, without spending rate budget; once
// one ends, the next is served.
func TestConcurrencyRefusesWhenFull(t *testing.T) {
	l, _ := newLimiter(t, 20, time.Minute)
	c := newConcurrency(t, 2, nil, nil)
	var limited []middleware.Event
	m, err := httplimit.New(l, httplimit.WithRoute("search"), httplimit.WithConcurrency(c, 0),
		httplimit.WithOnLimited(func(e middleware.Event) { limited = append(limited, e) }))
	require.NoError(t, err)
	slow := newBlocking()
	h := m.Handler(slow)

	var done []chan struct{}
	for range 2 {
		_, d := serveAsync(h, httptest.NewRequest("GET", "/search", nil))
		<-slow.started
		done = append(done, d)
	}
	rec := get(h, "/search")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Equal(t, []string{`"search-inflight";q=2;qu="concurrent-requests"`, `"search";q=20;w=60`}, rec.Header().Values("RateLimit-Policy"))
	assert.Empty(t, rec.Header().Values("RateLimit"), "no rate decision was made")
	p := decodeProblem(t, rec)
	assert.Equal(t, quotaExceeded, p.Type)
	assert.Equal(t, []string{"search-inflight"}, p.Violated)
	require.Len(t, limited, 1)
	assert.Equal(t, "search-inflight", limited[0].Decision.Policy)
	assert.Equal(t, 2, limited[0].Decision.Limit)
	assert.Equal(t, 18, l.Peek("search\x00192.0.2.1").Remaining+1, "the refusal spent no rate budget")

	close(slow.release) // both end
	<-done[0]
	<-done[1]
	rec = get(h, "/search")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, `"search-inflight";q=2;qu="concurrent-requests"`, rec.Header().Values("RateLimit-Policy")[0])
	assert.Equal(t, `"search";r=17;t=60`, rec.Header().Get("RateLimit"))
	assert.Equal(t, 0, c.Len(), "every slot is back")
}

// The slot goes back when the handler returns, when it panics, and when
// its client hangs up.
func TestConcurrencyReleases(t *testing.T) {
	l, _ := newLimiter(t, 100, time.Minute)
	c := newConcurrency(t, 1, nil, nil)
	m, err := httplimit.New(l, httplimit.WithConcurrency(c, 0))
	require.NoError(t, err)

	t.Run("return", func(t *testing.T) {
		for range 3 {
			assert.Equal(t, http.StatusOK, get(m.Handler(okHandler), "/").Code)
		}
		assert.Equal(t, 0, c.Len())
	})
	t.Run("panic", func(t *testing.T) {
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler failed") }))
		for range 3 {
			assert.PanicsWithValue(t, "handler failed", func() { get(h, "/") })
		}
		assert.Equal(t, 0, c.Len())
		assert.Equal(t, http.StatusOK, get(m.Handler(okHandler), "/").Code)
	})
	t.Run("hang-up", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		returned := make(chan struct{}, 1)
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // a long request, until its client goes
			returned <- struct{}{}
		}))
		srv := httptest.NewServer(h)
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		errs := make(chan error, 1)
		go func() {
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		}()
		require.Eventually(t, func() bool { return c.Len() == 1 }, 10*time.Second, time.Millisecond, "the request holds its slot")
		cancel()
		require.ErrorIs(t, <-errs, context.Canceled)
		<-returned
		srv.Close() // waits for the handler's frame, and its release, to finish
		assert.Equal(t, 0, c.Len(), "the slot came back with the hang-up")
	})
}

// A bounded wait: a request for a full key waits for a slot up to the
// wait, first come first served, and is served when one comes back, or
// refused when none does.
func TestConcurrencyWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := keyrate.New(100, time.Minute)
		require.NoError(t, err)
		defer l.Close()
		c := newConcurrency(t, 1, nil, nil)
		m, err := httplimit.New(l, httplimit.WithRoute("report"), httplimit.WithConcurrency(c, 5*time.Second))
		require.NoError(t, err)
		slow := newBlocking()
		h := m.Handler(slow)

		_, first := serveAsync(h, httptest.NewRequest("GET", "/", nil))
		<-slow.started
		start := time.Now()
		rec := get(m.Handler(okHandler), "/")
		assert.Equal(t, http.StatusTooManyRequests, rec.Code, "nothing came back within the wait")
		assert.Equal(t, 5*time.Second, time.Since(start))
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))

		second, done := serveAsync(m.Handler(okHandler), httptest.NewRequest("GET", "/", nil))
		time.Sleep(2 * time.Second)
		slow.release <- struct{}{} // the first ends 2s into the second's wait
		<-first
		<-done
		assert.Equal(t, http.StatusOK, second.Code)
		assert.Equal(t, 7*time.Second, time.Since(start), "served as soon as the slot came back")
	})
}

// A request whose client hangs up while it waits for a slot is never
// served, and takes none.
func TestConcurrencyClientGoneWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := keyrate.New(100, time.Minute)
		require.NoError(t, err)
		defer l.Close()
		c := newConcurrency(t, 1, nil, nil)
		var errs []error
		m, err := httplimit.New(l, httplimit.WithConcurrency(c, time.Minute),
			httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e.Err) }))
		require.NoError(t, err)
		hold, _, _ := c.TryAcquire(context.Background(), "192.0.2.1")
		served := false
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true })).
			ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/", nil))
		assert.False(t, served)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0], middleware.ErrClientGone)
		assert.ErrorIs(t, errs[0], context.DeadlineExceeded)
		hold()
		assert.Equal(t, 0, c.Len(), "the gone request took no slot")
		assert.Equal(t, 100, l.Peek("192.0.2.1").Remaining+1, "nor any rate budget")
	})
}

// failingSlots is an in-flight store that cannot answer.
type failingSlots struct{}

func (failingSlots) Tiered() bool { return false }

func (failingSlots) AcquireSlot(context.Context, string, bool) (func(), int, error) {
	return nil, 0, fmt.Errorf("slots: %w", keyrate.ErrUnavailable)
}

func TestConcurrencyStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		mode        middleware.FailureMode
		shadow      bool
		status      int
		shadowEvent bool
	}{
		{middleware.FailOpen, false, http.StatusOK, false},
		{middleware.FailClosed, false, http.StatusServiceUnavailable, false},
		{middleware.FailClosed, true, http.StatusOK, true},
	} {
		t.Run(fmt.Sprintf("mode %d shadow %v", tc.mode, tc.shadow), func(t *testing.T) {
			l, _ := newLimiter(t, 5, time.Minute)
			var errs []middleware.Event
			opts := []httplimit.Option{httplimit.WithConcurrency(failingSlots{}, time.Second), httplimit.WithFailureMode(tc.mode),
				httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e) })}
			if tc.shadow {
				opts = append(opts, httplimit.WithShadow())
			}
			rec := get(newHandler(t, l, opts...), "/")
			assert.Equal(t, tc.status, rec.Code)
			require.Len(t, errs, 1)
			assert.ErrorIs(t, errs[0].Err, keyrate.ErrUnavailable)
			assert.Equal(t, tc.shadowEvent, errs[0].Shadow)
			if tc.status == http.StatusOK {
				assert.Equal(t, `"default";r=4;t=60`, rec.Header().Get("RateLimit"), "the rate limit still applies")
			}
		})
	}
}

// Shadow mode holds no request up: a full key is reported as a shadowed
// refusal and served, with no rate decision, as enforcing would have
// refused it before one.
func TestConcurrencyShadow(t *testing.T) {
	l, _ := newLimiter(t, 5, time.Minute)
	c := newConcurrency(t, 1, nil, nil)
	var events []middleware.Event
	h := newHandler(t, l, httplimit.WithConcurrency(c, time.Hour), httplimit.WithShadow(),
		httplimit.WithOnDecision(func(e middleware.Event) { events = append(events, e) }))
	hold, _, _ := c.TryAcquire(context.Background(), "192.0.2.1")
	defer hold()
	rec := get(h, "/")
	assert.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, events, 1, "one event per request")
	assert.True(t, events[0].Shadow)
	assert.Equal(t, "inflight", events[0].Decision.Policy)
	assert.Empty(t, rec.Header().Get("Retry-After"))
	assert.Equal(t, 5, l.Peek("192.0.2.1").Remaining+1)
}

// The store's tier function sees the client's identity as sent, not the
// key: a pro API key gets the pro plan's slots, and the field says so.
func TestConcurrencyTiers(t *testing.T) {
	l, _ := newLimiter(t, 100, time.Minute)
	plan := func(id string) string {
		if strings.HasPrefix(id, "pro-") {
			return "pro"
		}
		return ""
	}
	c := newConcurrency(t, 1, plan, map[string]int{"pro": 3})
	m, err := httplimit.New(l, httplimit.WithRoute("search"), httplimit.WithConcurrency(c, 0),
		httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)))
	require.NoError(t, err)
	slow := newBlocking()
	h := m.Handler(slow)
	var wg sync.WaitGroup
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "pro-42")
		_, done := serveAsync(h, r)
		<-slow.started
		wg.Go(func() { <-done })
	}
	rec := get(h, "/", "X-API-Key", "pro-42")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, `"search-inflight";q=3;qu="concurrent-requests"`, rec.Header().Values("RateLimit-Policy")[0])
	rec = get(m.Handler(okHandler), "/", "X-API-Key", "free-1")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, `"search-inflight";q=1;qu="concurrent-requests"`, rec.Header().Values("RateLimit-Policy")[0])
	close(slow.release)
	wg.Wait()
}

func TestConcurrencyOptionErrors(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Minute)
	_, err := httplimit.New(l, httplimit.WithConcurrency(nil, 0))
	assert.ErrorIs(t, err, keyrate.ErrConfig)
	_, err = httplimit.New(l, httplimit.WithConcurrency(newConcurrency(t, 1, nil, nil), -time.Second))
	assert.ErrorIs(t, err, keyrate.ErrConfig)
}

// The body of an in-flight refusal is a problem document like a rate
// refusal's.
func TestConcurrencyRefusalBody(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Minute)
	c := newConcurrency(t, 1, nil, nil)
	hold, _, _ := c.TryAcquire(context.Background(), "192.0.2.1")
	defer hold()
	rec := get(newHandler(t, l, httplimit.WithConcurrency(c, 0)), "/")
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, "Rate limit exceeded; retry in 1 seconds.", body["detail"])
}
