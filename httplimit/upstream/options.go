package upstream

import (
	"net/http"
	"time"

	"github.com/keyrate/keyrate"
)

// Option configures the RoundTripper of NewTransport.
type Option func(*config)

type config struct {
	key      func(*http.Request) string
	keySet   bool
	failFast bool
	retries  int
	clock    keyrate.Clock
	clockSet bool
	maxPause time.Duration
}

// maxRetries bounds WithRetries: a request retried more often than this
// is one the upstream does not want now.
const maxRetries = 10

// defaultMaxPause is WithMaxPause's default.
const defaultMaxPause = time.Minute

// WithUpstreamKey sets the budget a request counts against, and what the
// transport learns of the upstream is kept by: the key f returns for it.
// Default: the request's host in lower case, with its port unless it is
// the scheme's default ("api.example.com", "127.0.0.1:8080"). Give a budget
// per account of a shared API with the host and the account's name, say.
// A nil f is an error; a request for which f returns "" is not sent, and
// RoundTrip returns an error wrapping keyrate.ErrInvalidKey.
func WithUpstreamKey(f func(*http.Request) string) Option {
	return func(c *config) { c.key, c.keySet = f, true }
}

// WithFailFast makes the transport refuse a request it would otherwise
// hold back, instead of waiting: RoundTrip returns a *LimitedError, whose
// RetryAfter says how long the request would have waited, without sending
// it. Use it where a caller has something better to do than wait (serve a
// cached answer, shed the work). Default: a request waits within its
// context.
func WithFailFast() Option {
	return func(c *config) { c.failFast = true }
}

// WithRetries lets the transport send a request again, up to n times, when
// the upstream answers it 429 or 503 with a Retry-After, once that wait is
// over, instead of returning the answer; when they are spent, the last
// answer is returned. Only a request safe to repeat is (an idempotent
// method, a body that can be read again: none, or GetBody); any other is
// never sent twice. n must be 0 to 10. Default: 0, no retries.
func WithRetries(n int) Option {
	return func(c *config) { c.retries = n }
}

// WithClock sets the clock the transport waits on and learns pauses by.
// Default: the system clock. Give it the clock the backend reads (a test's
// keyrate.ManualClock, say), so that both agree on the time; a Clock with
// the method After(time.Duration) <-chan time.Time, as keyrate.ManualClock
// has, wakes the transport's waits when it is moved. A nil clock is an
// error.
func WithClock(c keyrate.Clock) Option {
	return func(cfg *config) { cfg.clock, cfg.clockSet = c, true }
}

// WithMaxPause bounds how long one answer of an upstream can hold back the
// requests to it: a Retry-After, or a reset with nothing left, further off
// than d (as with "Retry-After: 99999999", a far-future date, or a Date
// far in the past) counts as d from the answer, and what is left lapses
// after d. A caller then waits at most d for what the upstream said, or
// gets what any wait that does not fit gives: an error wrapping
// context.DeadlineExceeded when its context's deadline comes first, a
// *LimitedError with WithFailFast. d must be positive. Default: a minute.
func WithMaxPause(d time.Duration) Option {
	return func(c *config) { c.maxPause = d }
}
