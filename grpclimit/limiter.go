package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/call"
)

// ErrBudgetExceeded is reported to OnError and the Observer when a backend
// call outlives the time budget. The error also matches
// context.DeadlineExceeded.
var ErrBudgetExceeded = call.ErrBudgetExceeded

// Limiter limits the calls of a gRPC server. Create one with New and install
// its Unary and Stream interceptors; it is safe for concurrent use.
type Limiter struct {
	fallback *backend          // for methods without their own
	methods  map[string]*route // WithMethod's, ready-made
	timed    bool              // a hook or an Observer is set: measure Event.Duration
	config                     // mdKey in lower case
}

// backend is one store and what it says about its quota.
type backend struct {
	caller *call.Caller
	limit  int           // from keyrate.Quota; 0 when unknown
	window time.Duration // from keyrate.Quota; 0 when unknown
}

// route is one method's budget: its backend and the names its fields use.
type route struct {
	*backend
	method string
	prefix string // method + "\x00"
	name   string // method as a structured-field string, quoted
	policy string // the ratelimit-policy value; "" when the limit is unknown
}

// New returns a Limiter that asks b about every call of every method not
// given its own backend with WithMethod. Each method has its own budget in
// b: the full method name prefixes the key. The quota written in
// ratelimit-policy comes from the backend's keyrate.Quota methods
// (*keyrate.Limiter and the Redis backend have them); a backend without them
// gets the limit of each Decision and no window. A nil backend or an invalid
// option gives an error wrapping keyrate.ErrConfig.
func New(b keyrate.Backend, opts ...Option) (*Limiter, error) {
	c := config{budget: 250 * time.Millisecond}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: grpclimit: backend is nil", keyrate.ErrConfig)
	case c.budget <= 0:
		return nil, fmt.Errorf("%w: grpclimit: time budget is %v, want > 0", keyrate.ErrConfig, c.budget)
	case c.failure != FailOpen && c.failure != FailClosed:
		return nil, fmt.Errorf("%w: grpclimit: unknown failure mode %d", keyrate.ErrConfig, c.failure)
	}
	if c.mdKey != "" {
		name := strings.ToLower(c.mdKey)
		if !validMetadataKey(name) {
			return nil, fmt.Errorf("%w: grpclimit: %q is not a metadata key (want 0-9 a-z - _ ., not starting with grpc-)", keyrate.ErrConfig, c.mdKey)
		}
		c.mdKey = name
	}
	l := &Limiter{
		fallback: newBackend(b, c.budget),
		methods:  make(map[string]*route, len(c.methods)),
		config:   c,
	}
	for method, mb := range c.methods {
		if mb == nil {
			return nil, fmt.Errorf("%w: grpclimit: backend for %s is nil", keyrate.ErrConfig, method)
		}
		if !validMethod(method) {
			return nil, fmt.Errorf("%w: grpclimit: %q is not a full method name (/pkg.Service/Method, printable ASCII)", keyrate.ErrConfig, method)
		}
		l.methods[method] = newRoute(method, newBackend(mb, c.budget))
	}
	l.timed = c.onDecision != nil || c.onLimited != nil || c.onError != nil || c.observer != nil
	return l, nil
}

func newBackend(b keyrate.Backend, budget time.Duration) *backend {
	nb := &backend{caller: call.New(b, budget)}
	if q, ok := b.(keyrate.Quota); ok {
		nb.limit, nb.window = q.Limit(), q.Window()
	}
	return nb
}

func newRoute(method string, b *backend) *route {
	r := &route{backend: b, method: method, prefix: method + "\x00", name: sfString(method)}
	if b.limit > 0 {
		r.policy = policyValue(r.name, b.limit, b.window)
	}
	return r
}

// routeFor returns method's route. A method without its own backend gets
// one built for this call: method names can come from the client (behind
// grpc.UnknownServiceHandler), so they are not cached.
func (l *Limiter) routeFor(method string) *route {
	if r, ok := l.methods[method]; ok {
		return r
	}
	return newRoute(method, l.fallback)
}

// decide asks the backend about a call of method and returns the header
// metadata to send and, when the call must not be served, its error.
func (l *Limiter) decide(ctx context.Context, method string, req any) (metadata.MD, error) {
	r := l.routeFor(method)
	ev := Event{Context: ctx, Method: method, Cost: 1}
	ev.Identity = l.identity(ctx)
	ev.Key = r.prefix + ev.Identity
	if l.cost != nil {
		ev.Cost = l.cost(ctx, method, req)
	}
	var began time.Time
	if l.timed {
		began = time.Now()
	}
	d, err := r.caller.Take(ctx, ev.Key, ev.Cost)
	if l.timed {
		ev.Duration = time.Since(began)
	}
	if err != nil {
		ev.Err = err
		report(l.onError, ev)
		if l.observer != nil {
			l.observer.ObserveError(method, err, ev.Duration)
		}
		return l.failed(r, err)
	}
	ev.Decision = d
	ev.Shadow = !d.Allowed && l.shadow
	report(l.onDecision, ev)
	if !d.Allowed {
		report(l.onLimited, ev)
	}
	if l.observer != nil {
		l.observer.ObserveDecision(method, d, ev.Shadow, ev.Duration)
	}
	md := r.fields(d)
	if d.Allowed || l.shadow {
		return md, nil
	}
	return md, refusal(method, d)
}

func report(hook func(Event), ev Event) {
	if hook != nil {
		hook(ev)
	}
}
