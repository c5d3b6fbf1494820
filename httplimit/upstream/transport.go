package upstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/keyrate/keyrate"
)

// transport is the http.RoundTripper NewTransport returns; the package
// doc says what it does, the README why.
type transport struct {
	base      http.RoundTripper
	backend   keyrate.Backend
	limiter   *keyrate.Limiter // backend, when it is one: WaitN waits for it
	upstreams *xsync.MapOf[string, *upstream]
	config
}

// NewTransport returns an http.RoundTripper that sends through base
// (http.DefaultTransport when nil) the requests b admits, holding each
// upstream to its budget in b and to what the upstream says of its limits
// (see the package doc). Put it in an http.Client; it is safe for
// concurrent use, and every caller sharing it shares what it learns. It
// has CloseIdleConnections, for http.Client's. A nil b, or an invalid
// option, gives an error wrapping keyrate.ErrConfig that names it.
func NewTransport(base http.RoundTripper, b keyrate.Backend, opts ...Option) (http.RoundTripper, error) {
	t := &transport{base: base, backend: b, upstreams: xsync.NewMapOf[string, *upstream]()}
	t.key, t.clock, t.maxPause = upstreamHost, wallClock{}, defaultMaxPause
	for _, o := range opts {
		if o != nil {
			o(&t.config)
		}
	}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	t.limiter, _ = b.(*keyrate.Limiter)
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: upstream: backend is nil", keyrate.ErrConfig)
	case t.keySet && t.key == nil:
		return nil, fmt.Errorf("%w: upstream: WithUpstreamKey's function is nil", keyrate.ErrConfig)
	case t.clockSet && t.clock == nil:
		return nil, fmt.Errorf("%w: upstream: WithClock's clock is nil", keyrate.ErrConfig)
	case t.retries < 0 || t.retries > maxRetries:
		return nil, fmt.Errorf("%w: upstream: WithRetries(%d), want 0 to %d", keyrate.ErrConfig, t.retries, maxRetries)
	case t.maxPause <= 0:
		return nil, fmt.Errorf("%w: upstream: WithMaxPause(%v), want a pause above 0", keyrate.ErrConfig, t.maxPause)
	}
	return t, nil
}

// LimitedError is the error of a request that a transport with
// WithFailFast did not send: its budget was spent, or the upstream had
// asked for a pause or had none left. RetryAfter is how long it would
// have waited.
type LimitedError struct {
	RetryAfter time.Duration
}

// Error says that the budget is spent, and when the request would fit.
func (e *LimitedError) Error() string {
	return "upstream: the upstream's budget is spent; retry in " + e.RetryAfter.String()
}

// RoundTrip sends req once its upstream's budget and pause allow, and
// learns from the answer. It returns the upstream's answer, whatever its
// status, or an error without sending req: req's context ended first (its
// error; at once when its deadline comes before the wait would end,
// with an error wrapping context.DeadlineExceeded), a *LimitedError with
// WithFailFast, an error wrapping keyrate.ErrExceedsLimit when no request
// can ever fit the budget, keyrate.ErrInvalidKey for a request with no
// upstream key, or the backend's error when it could not decide. Errors
// never name the key.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := t.key(req)
	if key == "" {
		closeBody(req)
		return nil, fmt.Errorf("upstream: %w: the request has no upstream key", keyrate.ErrInvalidKey)
	}
	send := req
	for try := 0; ; try++ {
		if err := t.admit(req.Context(), key); err != nil {
			closeBody(send)
			return nil, err
		}
		resp, err := t.base.RoundTrip(send)
		if err != nil {
			return nil, err // base closed the body
		}
		paused := t.learn(key, resp)
		if !paused || try >= t.retries || !retryable(req) {
			return resp, nil
		}
		next, err := rewound(req)
		if err != nil {
			return resp, nil // the body cannot be read again: the answer stands
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so that the connection can be kept
		resp.Body.Close()
		send = next
	}
}

// admit waits until a request for key may be sent: the upstream's pause
// and hold are over, and the backend admitted it.
func (t *transport) admit(ctx context.Context, key string) error {
	for {
		if wait := t.held(key, t.clock.Now()); wait > 0 {
			if err := t.await(ctx, wait); err != nil {
				return err
			}
			continue
		}
		if err := t.take(ctx, key); err != nil {
			return err
		}
		if t.spend(key, t.clock.Now()) {
			return nil
		}
		// A pause began while the request waited for its budget: the
		// budget it took stays spent, as sending it later could bunch it
		// with the requests after the pause.
	}
}

// take takes one request's budget for key, waiting for it unless the
// transport fails fast.
func (t *transport) take(ctx context.Context, key string) error {
	if t.limiter != nil && !t.failFast {
		if err := t.limiter.WaitN(ctx, key, 1); err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		return nil
	}
	for {
		d, err := t.backend.TakeContext(ctx, key, 1)
		switch {
		case err != nil:
			return fmt.Errorf("upstream: the budget could not be had: %w", err)
		case d.Allowed:
			return nil
		case d.RetryAfter <= 0 && !d.Overflow:
			return fmt.Errorf("upstream: %w: the budget's limit is %d", keyrate.ErrExceedsLimit, d.Limit)
		}
		if err := t.await(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

// await waits d on the transport's clock within ctx, or refuses to: with
// WithFailFast, and when ctx's deadline comes first.
func (t *transport) await(ctx context.Context, d time.Duration) error {
	if t.failFast {
		return &LimitedError{RetryAfter: d}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return fmt.Errorf("upstream: a wait of %v would pass the context deadline: %w", d, context.DeadlineExceeded)
	}
	var wake <-chan time.Time
	if c, ok := t.clock.(interface {
		After(time.Duration) <-chan time.Time
	}); ok {
		wake = c.After(d)
	} else {
		timer := time.NewTimer(d)
		defer timer.Stop()
		wake = timer.C
	}
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// upstreamHost is the default upstream key: the request's host in lower
// case, without the scheme's default port.
func upstreamHost(r *http.Request) string {
	host := strings.ToLower(r.URL.Host)
	if h, port, err := net.SplitHostPort(host); err == nil &&
		(port == "443" && r.URL.Scheme == "https" || port == "80" && r.URL.Scheme == "http") {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return host
}

// retryable reports whether req may be sent again: its method is
// idempotent (RFC 9110, section 9.2.2) and its body can be read again.
func retryable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	}
	return false
}

// rewound returns a copy of req to send again, with its body from the
// start.
func rewound(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

// closeBody closes the body of a request that is not sent, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections closes the idle connections of the underlying
// transport, when it has that method, as http.Client.CloseIdleConnections
// expects of its Transport.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// wallClock is the default clock: the system's.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
