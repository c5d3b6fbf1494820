package grpclimit

import (
	"context"
	"fmt"
	"github.com/keyrate/keyrate/middleware/adapter"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
	kbackend "github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// Limiter limits the calls of a gRPC server. Create one with New and install
// its Unary and Stream interceptors; it is safe for concurrent use.
type Limiter struct {
	fallback *backend          // for methods without their own
	methods  map[string]*route // WithMethod's, ready-made
	timed    bool              // a hook or an Observer is set: measure Event.Duration
	config                     // mdKey in lower case

	slots *adapter.SlotGate // WithConcurrency's; nil without
}

// backend is one store and what it says about its policies.
type backend struct {
	caller   *adapter.Caller
	policies []keyrate.Policy // its Policies; nil when unknown
	window   time.Duration    // of a decision that gives none; 0 when unknown
}

// route is one method's budget: its backend and its ratelimit-policy.
type route struct {
	*backend
	method string
	prefix string // method + "\x00"
	policy string // the ratelimit-policy value for the backend's policies; see newRoute
}

// New returns a Limiter that asks b about every call of every method not
// given its own backend with WithMethod. Each method has its own budget in
// b: the full method name prefixes the key. The ratelimit-policy and
// ratelimit metadata list every policy of each Decision. Without one (a call
// served while the store is unavailable), ratelimit-policy lists the
// backend's own policies: those its Policies method lists, when it has one
// (backend.Described, as *keyrate.Limiter and the Redis backend are),
// else none. A nil backend, an invalid option, or WithTimeBudget when
// every backend is backend.Bounded gives an error wrapping
// keyrate.ErrConfig.
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
	case c.failure != middleware.FailOpen && c.failure != middleware.FailClosed:
		return nil, fmt.Errorf("%w: grpclimit: unknown failure mode %d", keyrate.ErrConfig, c.failure)
	case !c.revision.Known():
		return nil, fmt.Errorf("%w: grpclimit: unknown RateLimit field revision %v", keyrate.ErrConfig, c.revision)
	case c.budgetSet && allBounded(b, c.methods):
		return nil, fmt.Errorf("%w: grpclimit: every backend bounds its own calls (backend.Bounded), so the time budget would bound none; set the budget on the backend, not with WithTimeBudget", keyrate.ErrConfig)
	}
	if c.mdKey != "" {
		name := strings.ToLower(c.mdKey)
		if !validMetadataKey(name) {
			return nil, fmt.Errorf("%w: grpclimit: %q is not a metadata key (want 0-9 a-z - _ ., not starting with grpc-)", keyrate.ErrConfig, c.mdKey)
		}
		c.mdKey = name
	}
	fallback, err := newBackend(b, c.budget, c.refund != nil, c.tokens)
	if err != nil {
		return nil, err
	}
	var slots *adapter.SlotGate
	if c.concurrencySet {
		if slots, err = adapter.NewSlotGate(c.concurrency, c.concurrencyWait, c.failure, c.shadow, c.hooks); err != nil {
			return nil, err
		}
	}
	l := &Limiter{
		slots:    slots,
		fallback: fallback,
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
		nb, err := newBackend(mb, c.budget, c.refund != nil, c.tokens)
		if err != nil {
			return nil, err
		}
		l.methods[method] = newRoute(method, nb, true)
	}
	l.timed = c.hooks.Timed()
	return l, nil
}

// allBounded reports whether b and every backend of methods is
// backend.Bounded. A nil backend is not: New refuses it on its own.
func allBounded(b keyrate.Backend, methods map[string]keyrate.Backend) bool {
	for _, mb := range methods {
		if _, ok := mb.(kbackend.Bounded); !ok {
			return false
		}
	}
	_, ok := b.(kbackend.Bounded)
	return ok
}

func newBackend(b keyrate.Backend, budget time.Duration, refunds, tokens bool) (*backend, error) {
	caller, err := adapter.NewCaller(b, budget)
	if err != nil {
		return nil, err
	}
	if refunds && !caller.CanRefund() {
		return nil, fmt.Errorf("%w: grpclimit: WithRefund, but a backend cannot refund", keyrate.ErrConfig)
	}
	if tokens && !caller.CanTakeAll() {
		return nil, fmt.Errorf("%w: grpclimit: WithTokenBudget, but a backend cannot decide two keys at once (TakeAll)", keyrate.ErrConfig)
	}
	nb := &backend{caller: caller}
	if l, ok := b.(kbackend.Described); ok {
		nb.policies = l.Policies()
	}
	if len(nb.policies) > 0 {
		nb.window = nb.policies[0].Window
	}
	return nb, nil
}

// newRoute returns method's route on b. A kept route (WithMethod's) writes
// the ratelimit-policy value of b's policies once, here, for all its calls;
// one built for a single call writes it only if that call needs it.
func newRoute(method string, b *backend, kept bool) *route {
	r := &route{backend: b, method: method, prefix: method + "\x00"}
	// A calendar policy's w is its current period's length: each decision
	// writes its own.
	calendar := slices.ContainsFunc(r.policies, func(p keyrate.Policy) bool { return p.Calendar != (keyrate.Calendar{}) })
	if kept && !calendar {
		r.policy = r.defaultPolicy()
	}
	return r
}

// defaultPolicy returns the ratelimit-policy value for the backend's own
// policies; "" when it reports none.
func (r *route) defaultPolicy() string {
	if r.policy != "" {
		return r.policy
	}
	return string(ratelimitfield.AppendPolicies(nil, r.policies, r.method, ""))
}

// routeFor returns method's route. A method without its own backend gets
// one built for this call: method names can come from the client (behind
// grpc.UnknownServiceHandler), so they are not cached.
func (l *Limiter) routeFor(method string) *route {
	if r, ok := l.methods[method]; ok {
		return r
	}
	return newRoute(method, l.fallback, false)
}

// decide asks the backend about a call of method and returns the header
// metadata to send and, when the call must not be served, its error; for a
// call whose events may be given back, the context to serve it under (with
// its reservation, see middleware.ReportWeight) and the function that
// settles it once served. The call's in-flight slot (WithConcurrency) is
// taken first; release gives it back, and is never nil.
func (l *Limiter) decide(ctx context.Context, method string, req any) (md metadata.MD, served context.Context, after func(error), release func(), err error) {
	r := l.routeFor(method)
	ev := middleware.Event{Route: method, Weight: 1, Context: ctx}
	var sent string
	ev.Identity, sent = l.identity(ctx)
	ev.Key = r.prefix + ev.Identity
	if l.weight != nil {
		ev.Weight = l.weight(ctx, method, req)
	}
	release = noSlot
	var slot string // the in-flight limit's ratelimit-policy member
	if l.slots != nil {
		var stop bool
		if release, slot, stop, md, err = l.holdSlot(ctx, r, ev, sent); stop {
			return md, ctx, nil, release, err
		}
	}
	md, served, after, err = l.decideRate(ctx, r, ev, sent)
	return withSlot(md, slot), served, after, release, err
}

// decideRate asks r's backend about the call ev describes, made by the
// client sent names (see decide).
func (l *Limiter) decideRate(ctx context.Context, r *route, ev middleware.Event, sent string) (metadata.MD, context.Context, func(error), error) {
	method := ev.Route
	var began time.Time
	if l.timed {
		began = time.Now()
	}
	var (
		d    keyrate.Decision
		err  error
		hits *[2]keyrate.Hit // WithTokenBudget's
	)
	if l.tokens {
		d, hits, err = r.takeTokens(ctx, &ev)
	} else {
		err = r.caller.TakeInto(ctx, ev.Key, sent, ev.Weight, &d)
	}
	if l.timed {
		ev.Duration = time.Since(began)
	}
	if err != nil {
		ev.Err = err
		md, err := l.failed(ctx, r, ev)
		return md, ctx, nil, err
	}
	ev.Decision = d
	ev.Shadow = !d.Allowed && l.shadow
	l.hooks.Decided(ev)
	var md metadata.MD
	if ev.Budgets != nil {
		md = r.tokenFields(ev.Budgets, l.revision, ev.Weight, d.Allowed)
	} else {
		md = r.fields(&d, l.revision, ev.Weight)
	}
	reserve := l.weight != nil && r.caller.CanRefund()
	if d.Allowed && (l.refund != nil || reserve) && holds(&ev) {
		var res *adapter.Reservation
		if reserve {
			ctx, res = adapter.Reserve(ctx, ev.Weight)
		}
		if hits != nil {
			return md, ctx, func(served error) { l.settleTokens(ctx, r, ev, hits, res, served) }, nil
		}
		return md, ctx, func(served error) { l.settle(ctx, r, ev, res, served) }, nil
	}
	if d.Allowed || l.shadow {
		return md, ctx, nil, nil
	}
	return md, ctx, nil, refusal(method, d)
}

// settle gives back the events of a call served with the outcome served:
// all of them when WithRefund's function says its code should not count,
// else the part of its weight the handler reported it did not use
// (middleware.ReportWeight). The header metadata went out with what was
// reserved.
func (l *Limiter) settle(ctx context.Context, r *route, ev middleware.Event, res *adapter.Reservation, served error) {
	n := 0 // nothing
	switch {
	case l.refund != nil && l.refund(status.Code(served)):
		n = ev.Decision.Receipt.N() // all
	case res != nil:
		if unused, ok := res.Unused(); ok {
			n = unused
		}
	}
	if n <= 0 {
		return
	}
	if err := r.caller.RefundN(ctx, ev.Key, &ev.Decision, n); err != nil {
		ev.Err = err
		l.hooks.Failed(ev)
	}
}
