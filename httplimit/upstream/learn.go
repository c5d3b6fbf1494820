package upstream

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keyrate/keyrate/ratelimitfield"
)

// The fields an upstream says what it has left in, as httplimit writes
// them.
var (
	hRateLimit  = http.CanonicalHeaderKey("RateLimit")
	hRemaining  = http.CanonicalHeaderKey("RateLimit-Remaining")
	hReset      = http.CanonicalHeaderKey("RateLimit-Reset")
	hXRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hXReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// upstream is what a transport has learned of one upstream key: a pause
// it asked for, and how many requests it has left until its reset. An
// entry lives while it holds something not yet lapsed.
type upstream struct {
	mu      sync.Mutex
	pause   time.Time // no request before it
	left    int64     // requests left before reset; < 0: unknown
	reset   time.Time
	retired bool // out of the map: learn makes another
}

// wait returns how long a request must wait at now: until the pause ends,
// or, with nothing left, until the reset. Called with u.mu held.
func (u *upstream) wait(now time.Time) time.Duration {
	var d time.Duration
	if now.Before(u.pause) {
		d = u.pause.Sub(now)
	}
	if u.left == 0 && now.Before(u.reset) {
		d = max(d, u.reset.Sub(now))
	}
	return d
}

// lapsed reports whether u holds nothing at now. Called with u.mu held.
func (u *upstream) lapsed(now time.Time) bool {
	return !now.Before(u.pause) && (u.left < 0 || !now.Before(u.reset))
}

// held returns how long a request for key must wait at now, from what the
// upstream said; an entry that has lapsed leaves the map.
func (t *transport) held(key string, now time.Time) time.Duration {
	u, ok := t.upstreams.Load(key)
	if !ok {
		return 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.lapsed(now) && !u.retired {
		u.retired = true
		t.upstreams.Compute(key, func(cur *upstream, loaded bool) (*upstream, bool) {
			return cur, loaded && cur == u
		})
	}
	return u.wait(now)
}

// spend counts a request for key about to be sent at now against what the
// upstream said it has left, and reports whether it may go: false when a
// pause began, or the last of what was left went, since held said it
// could.
func (t *transport) spend(key string, now time.Time) bool {
	u, ok := t.upstreams.Load(key)
	if !ok {
		return true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.wait(now) > 0 {
		return false
	}
	if u.left > 0 && now.Before(u.reset) {
		u.left--
	}
	return true
}

// learn reads what resp says of the upstream's limits into key's entry,
// and reports whether it asked for a pause (a 429 or 503 with a
// Retry-After), after which a request may be retried.
func (t *transport) learn(key string, resp *http.Response) bool {
	now := t.clock.Now()
	date := now // the upstream's now, for the instants it sends
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		date = d
	}
	var pause time.Duration
	paused := false
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		pause, paused = retryAfter(resp.Header.Get("Retry-After"), date)
	}
	left, reset, known := remaining(resp.Header, date)
	if !paused && !known {
		return false
	}
	// However far off the upstream says, no answer holds it back longer
	// than maxPause.
	pause, reset = min(pause, t.maxPause), min(reset, t.maxPause)
	for {
		u, _ := t.upstreams.LoadOrCompute(key, func() *upstream { return &upstream{left: -1} })
		u.mu.Lock()
		if u.retired {
			u.mu.Unlock()
			continue
		}
		if paused {
			u.pause = maxTime(u.pause, now.Add(pause))
		}
		if known {
			u.left, u.reset = left, now.Add(reset)
		}
		u.mu.Unlock()
		return paused
	}
}

// retryAfter reads a Retry-After: delay-seconds, or an HTTP date, read
// against date, the answer's own. A delay too long for a Duration is the
// longest one (the caller bounds it).
func retryAfter(v string, date time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if n < 0 {
			return 0, false
		}
		return seconds(float64(n)), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(date), 0), true
}

// remaining reads what the upstream says is left: the RateLimit field's
// member with the least remaining, else RateLimit-Remaining and
// RateLimit-Reset, else X-RateLimit-Remaining and X-RateLimit-Reset. It
// returns the requests left, the time until the reset, and whether any
// field said both.
func remaining(h http.Header, date time.Time) (int64, time.Duration, bool) {
	if lines := h.Values(hRateLimit); len(lines) > 0 {
		if qs, err := ratelimitfield.ParseRateLimit(lines); err == nil {
			best := -1
			for i, q := range qs {
				if q.HasReset && (best < 0 || q.Remaining < qs[best].Remaining) {
					best = i
				}
			}
			if best >= 0 {
				return qs[best].Remaining, qs[best].Reset, true
			}
		}
	}
	for _, f := range [...]struct{ remaining, reset string }{{hRemaining, hReset}, {hXRemaining, hXReset}} {
		left, err := strconv.ParseInt(strings.TrimSpace(h.Get(f.remaining)), 10, 64)
		if err != nil || left < 0 {
			continue
		}
		if reset, ok := resetIn(h.Get(f.reset), date); ok {
			return left, reset, true
		}
	}
	return 0, 0, false
}

// unixTimes is where a reset stops reading as seconds from now and starts
// reading as a Unix time in seconds: a billion seconds is 31 years, past
// any window, and a billion seconds after 1970 is 2001, before any answer.
const unixTimes = 1e9

// resetIn reads a reset in seconds from now, fractions allowed, or a Unix
// time in seconds, read against date, the answer's own.
func resetIn(v string, date time.Time) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f >= 0) || f > 1e12 { // !(f >= 0): NaN too
		return 0, false
	}
	if f >= unixTimes {
		sec, frac := math.Modf(f)
		return max(time.Unix(int64(sec), int64(frac*1e9)).Sub(date), 0), true
	}
	return seconds(f), true
}

// seconds returns f seconds, f >= 0, as a Duration: the longest one when
// f is too long for one.
func seconds(f float64) time.Duration {
	if f*float64(time.Second) >= math.MaxInt64 { // float64(math.MaxInt64) is 2^63
		return math.MaxInt64
	}
	return time.Duration(f * float64(time.Second))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
