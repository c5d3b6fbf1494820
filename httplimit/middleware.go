package httplimit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/call"
)

// Event describes one request the middleware decided, or failed to; the
// hooks receive it.
type Event struct {
	Request *http.Request
	// Route is the name given with WithRoute.
	Route string
	// Identity is what the KeyFunc returned ("" if it failed).
	Identity string
	// Key is the key the backend was asked about: Route + "\x00" + Identity,
	// or Identity alone when Route is "".
	Key string
	// Cost is the request's weight.
	Cost int
	// Decision is the backend's answer; zero when Err is set.
	Decision keyrate.Decision
	// Err is set for OnError: the KeyFunc's error, the backend's, or one
	// matching ErrBudgetExceeded.
	Err error
	// Duration is how long the backend took to answer or fail; 0 when it
	// was not asked. It is measured only when a hook is set.
	Duration time.Duration
	// Shadow reports a refusal that WithShadow let through: the request was
	// decided, recorded and reported as limited, then served.
	Shadow bool
}

// Middleware limits the requests that reach a handler. Create one with New
// and wrap handlers with its Handler method; one Middleware is one budget
// (one route), and may wrap several handlers that should share it.
type Middleware struct {
	backend *call.Caller
	timed   bool   // a hook is set: measure Event.Duration
	prefix  string // route + "\x00", or ""
	config

	policy    string // RateLimit-Policy value
	name      string // the route as a structured-field string, quoted
	windowSec int64
}

// New returns a Middleware that asks b about every request. The quota
// written in RateLimit-Policy comes from b's keyrate.Quota methods
// (*keyrate.Limiter and the Redis backend have them) or from WithWindow. An invalid option, a nil b,
// or an unknown window gives an error wrapping keyrate.ErrConfig.
func New(b keyrate.Backend, opts ...Option) (*Middleware, error) {
	c := config{budget: 250 * time.Millisecond, headers: DraftHeaders}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if b == nil {
		return nil, fmt.Errorf("%w: httplimit: backend is nil", keyrate.ErrConfig)
	}
	limit, window := 0, c.window
	if p, ok := b.(keyrate.Quota); ok {
		limit = p.Limit()
		if window == 0 {
			window = p.Window()
		}
	}
	switch {
	case window <= 0:
		return nil, fmt.Errorf("%w: httplimit: window is %v; the backend does not report one, so pass WithWindow", keyrate.ErrConfig, window)
	case c.budget <= 0:
		return nil, fmt.Errorf("%w: httplimit: time budget is %v, want > 0", keyrate.ErrConfig, c.budget)
	case c.failure != FailOpen && c.failure != FailClosed:
		return nil, fmt.Errorf("%w: httplimit: unknown failure mode %d", keyrate.ErrConfig, c.failure)
	}
	name, err := sfString(c.route)
	if err != nil {
		return nil, err
	}
	if c.key == nil {
		c.key, _ = ClientIP()
	}
	if c.limited == nil {
		c.limited = DefaultLimitedHandler
	}
	m := &Middleware{
		backend:   call.New(b, c.budget),
		config:    c,
		name:      name,
		windowSec: ceilSeconds(window),
	}
	m.timed = c.onDecision != nil || c.onLimited != nil || c.onError != nil
	if c.route != "" {
		m.prefix = c.route + "\x00"
	}
	if limit > 0 {
		m.policy = m.policyFor(limit)
	}
	return m, nil
}

// Handler returns next wrapped by the limit. Its type,
// func(http.Handler) http.Handler, is what http.ServeMux users, chi's Use
// and gorilla's Use expect.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip != nil && m.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	ev := Event{Request: r, Route: m.route, Cost: 1}
	id, err := m.key(r)
	if err != nil {
		// Never serve a request the limiter cannot place, whatever the
		// failure mode: a client able to provoke the error would go unlimited.
		ev.Err = err
		m.report(m.onError, ev)
		writeProblem(w, http.StatusInternalServerError, "The client could not be identified.")
		return
	}
	ev.Identity, ev.Key = id, id
	if m.prefix != "" {
		ev.Key = m.prefix + id
	}
	if m.cost != nil {
		ev.Cost = m.cost(r)
	}
	var began time.Time
	if m.timed {
		began = time.Now()
	}
	d, err := m.backend.Take(r.Context(), ev.Key, ev.Cost)
	if m.timed {
		ev.Duration = time.Since(began)
	}
	if err != nil {
		ev.Err = err
		m.report(m.onError, ev)
		if m.failure == FailOpen {
			m.setPolicy(w.Header())
			next.ServeHTTP(w, r)
			return
		}
		writeProblem(w, http.StatusServiceUnavailable, "The rate limiter is unavailable; try again shortly.")
		return
	}
	ev.Decision = d
	m.setHeaders(w.Header(), d)
	m.report(m.onDecision, ev)
	if d.Allowed {
		next.ServeHTTP(w, r)
		return
	}
	ev.Shadow = m.shadow
	m.report(m.onLimited, ev)
	if m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	m.limited(w, r, d)
}

func (m *Middleware) report(hook func(Event), ev Event) {
	if hook != nil {
		hook(ev)
	}
}
