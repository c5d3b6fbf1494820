package upstream_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit/upstream"
)

// farOff are answers that ask for a pause far longer than anyone should
// wait, each set on the upstream's first answer.
var farOff = map[string]func(h http.Header, now time.Time) int{
	"429 Retry-After 99999999 seconds": func(h http.Header, _ time.Time) int {
		h.Set("Retry-After", "99999999") // 27,777 hours
		return http.StatusTooManyRequests
	},
	"429 Retry-After too long for a Duration": func(h http.Header, _ time.Time) int {
		h.Set("Retry-After", "99999999999999999999999")
		return http.StatusTooManyRequests
	},
	"503 Retry-After a far-future date": func(h http.Header, now time.Time) int {
		h.Set("Date", now.UTC().Format(http.TimeFormat))
		h.Set("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")
		return http.StatusServiceUnavailable
	},
	"429 Retry-After against a Date in 1970": func(h http.Header, now time.Time) int {
		h.Set("Date", time.Unix(0, 0).UTC().Format(http.TimeFormat))
		h.Set("Retry-After", now.Add(time.Second).UTC().Format(http.TimeFormat))
		return http.StatusTooManyRequests
	},
	"200 X-RateLimit-Remaining 0, reset in 999999999 seconds": func(h http.Header, _ time.Time) int {
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset", "999999999") // 277,777 hours
		return http.StatusOK
	},
	"200 X-RateLimit-Remaining 0, reset at a Unix time in the year 33658": func(h http.Header, now time.Time) int {
		h.Set("Date", now.UTC().Format(http.TimeFormat))
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset", "999999999999")
		return http.StatusOK
	},
	"200 RateLimit r=0 t=999999999": func(h http.Header, _ time.Time) int {
		h.Set("RateLimit", `"p";r=0;t=999999999`)
		return http.StatusOK
	},
}

// No answer holds the upstream back longer than the maximum pause: after
// any of farOff, the next call arrives a minute later by default, or
// WithMaxPause's time, not years later.
func TestTransportBoundsThePause(t *testing.T) {
	for name, answer := range farOff {
		for _, maxPause := range []time.Duration{0, 5 * time.Second} {
			want := time.Minute
			var opts []upstream.Option
			if maxPause > 0 {
				want = maxPause
				opts = append(opts, upstream.WithMaxPause(maxPause))
			}
			t.Run(name+"/"+want.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					clock := newBubbleClock()
					l, err := keyrate.New(100, time.Second, keyrate.WithClock(clock))
					require.NoError(t, err)
					defer l.Close()
					up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
						if n == 1 {
							w.WriteHeader(answer(w.Header(), clock.Now()))
						}
					})
					opts := append([]upstream.Option{upstream.WithClock(clock)}, opts...)
					client := &http.Client{Transport: mustTransport(t, nil, l, opts...)}
					run(func() {
						for range 2 {
							_, err := fetch(t, client, up.URL)
							assert.NoError(t, err)
						}
					})
					assert.Equal(t, []time.Duration{0, want}, up.arrivals())
				})
			})
		}
	}
}

// A caller whose deadline comes before the (bounded) pause ends gets the
// error of a wait that does not fit, at once; with WithFailFast, a
// *LimitedError of the bounded pause.
func TestTransportPauseAgainstTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBubbleClock()
		l, err := keyrate.New(100, time.Second, keyrate.WithClock(clock))
		require.NoError(t, err)
		defer l.Close()
		up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
			w.Header().Set("Retry-After", "99999999")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		client := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock))}
		code, err := fetch(t, client, up.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, code)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
		_, err = client.Do(req)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "a minute's pause does not fit 10s")

		failFast := &http.Client{Transport: mustTransport(t, nil, l, upstream.WithClock(clock), upstream.WithFailFast())}
		code, err = fetch(t, failFast, up.URL) // each Transport learns for itself
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, code)
		_, err = fetch(t, failFast, up.URL)
		var limited *upstream.LimitedError
		require.ErrorAs(t, err, &limited)
		assert.Equal(t, time.Minute, limited.RetryAfter)
		assert.Len(t, up.arrivals(), 2)
	})
}
