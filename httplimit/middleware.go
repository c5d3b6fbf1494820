package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/clientkey"
	"github.com/keyrate/keyrate/internal/reservation"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/middleware/adapter"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// errEmptyIdentity is reported for a request whose KeyFunc returned "":
// limiting it under a shared empty identity would let any such client spend
// every other one's budget, and some stores cannot place an empty key.
var errEmptyIdentity = fmt.Errorf("%w: httplimit: the key function returned an empty identity", keyrate.ErrInvalidKey)

const (
	detailNoIdentity = "The request does not identify a client that can be rate-limited."
	detailGone       = "The request was cancelled or timed out before it could be decided."
)

// maxRoute bounds a route name, so that a key (route, separator, identity
// of at most clientkey.MaxLen bytes) stays well inside what any store takes.
const maxRoute = 256

// Middleware limits the requests that reach a handler. Create one with New
// and wrap handlers with its Handler method; one Middleware is one budget
// (one route), and may wrap several handlers that should share it.
//
// Middlewares may be nested, a per-route budget inside a global one: the
// response then lists both policies. Each is its own budget, decided on its
// own: a request the inner one refuses has already been counted by the
// outer one.
type Middleware struct {
	backend *adapter.Caller
	timed   bool      // a hook or an Observer is set: measure Event.Duration, and tell them
	reserve bool      // WithWeight, and a backend that gives weight back: requests may middleware.ReportWeight
	prefix  string    // route + "\x00", or ""
	ip      *ipConfig // the default KeyFunc's, built into the key directly; nil for others
	config

	// The backend's own policies (see New), and their RateLimit-Policy
	// value, written once: sent without a decision, and with every decision
	// under them.
	policies []keyrate.Policy // nil when unknown
	policy   string           // "" when unknown
	calendar bool             // a policy is a calendar's: policy has no w, so each decision writes its own
	fallback time.Duration    // the window of a decision that gives none: the backend's first policy's

	slots *adapter.SlotGate // WithConcurrency's; nil without

	ownRefusal bool    // no WithLimitedHandler: DefaultLimitedHandler's refusal shares the fields' room
	room       [2]room // what a response's fields take: admitted or served, and refused by ownRefusal
}

// New returns a Middleware that asks b about every request. How b is
// called depends on what it says of itself: see WithTimeBudget. An invalid
// option, a nil b, or WithTimeBudget for a backend.Bounded b gives an
// error wrapping keyrate.ErrConfig.
//
// The RateLimit fields list the policies of each Decision (see
// DraftHeaders), with the window it says (backend.Combine sets it; a
// Decision made by hand without one is advertised without w). Without a
// decision (the store unavailable) they list b's own policies, when it is
// backend.Described (*keyrate.Limiter, the Redis backend; with tiers, the
// default tier's); else none.
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
	var policies []keyrate.Policy
	if l, ok := b.(backend.Described); ok {
		policies = l.Policies()
	}
	switch {
	case c.budget <= 0:
		return nil, fmt.Errorf("%w: httplimit: time budget is %v, want > 0", keyrate.ErrConfig, c.budget)
	case c.budgetSet && isBounded(b):
		return nil, fmt.Errorf("%w: httplimit: the backend bounds its own calls (its time budget is %v); set the budget there, not with WithTimeBudget", keyrate.ErrConfig, b.(backend.Bounded).TimeBudget())
	case c.failure != middleware.FailOpen && c.failure != middleware.FailClosed:
		return nil, fmt.Errorf("%w: httplimit: unknown failure mode %d", keyrate.ErrConfig, c.failure)
	case len(c.route) > maxRoute:
		return nil, fmt.Errorf("%w: httplimit: route name is %d bytes, want at most %d", keyrate.ErrConfig, len(c.route), maxRoute)
	case !printable(c.route):
		return nil, fmt.Errorf("%w: httplimit: route %q: only printable ASCII fits a RateLimit field", keyrate.ErrConfig, c.route)
	case !printable(c.unit):
		return nil, fmt.Errorf("%w: httplimit: quota unit %q: only printable ASCII fits a RateLimit field", keyrate.ErrConfig, c.unit)
	case !c.revision.Known():
		return nil, fmt.Errorf("%w: httplimit: unknown RateLimit field revision %v", keyrate.ErrConfig, c.revision)
	case c.headers&TokenHeaders != 0 && !c.tokens:
		return nil, fmt.Errorf("%w: httplimit: TokenHeaders without WithTokenBudget: there is no tokens budget to report", keyrate.ErrConfig)
	}
	var ip *ipConfig
	if c.key == nil {
		ip = defaultIP()
		c.key = ip.key
	}
	ownRefusal := c.limited == nil
	if ownRefusal {
		c.limited = DefaultLimitedHandler
	}
	caller, err := adapter.NewCaller(b, c.budget)
	if err != nil {
		return nil, err
	}
	if c.refund != nil && !caller.CanRefund() {
		return nil, fmt.Errorf("%w: httplimit: WithRefund, but the backend cannot refund", keyrate.ErrConfig)
	}
	if c.tokens && !caller.CanTakeAll() {
		return nil, fmt.Errorf("%w: httplimit: WithTokenBudget, but the backend cannot decide two keys at once (TakeAll)", keyrate.ErrConfig)
	}
	var slots *adapter.SlotGate
	if c.concurrencySet {
		if slots, err = adapter.NewSlotGate(c.concurrency, c.concurrencyWait, c.failure, c.shadow, c.hooks); err != nil {
			return nil, err
		}
	}
	m := &Middleware{
		backend:  caller,
		slots:    slots,
		ip:       ip,
		config:   c,
		policies: policies,
	}
	if len(policies) > 0 {
		m.fallback = policies[0].Window
		m.policy = string(ratelimitfield.AppendPolicies(nil, policies, c.route, c.unit))
		m.calendar = slices.ContainsFunc(policies, func(p keyrate.Policy) bool { return p.Calendar != (keyrate.Calendar{}) })
	}
	m.timed = c.hooks.Timed()
	m.ownRefusal = ownRefusal
	m.room = [2]room{m.roomFor(false), m.roomFor(true)}
	m.reserve = c.weight != nil && caller.CanRefund()
	if c.route != "" {
		m.prefix = c.route + "\x00"
	}
	return m, nil
}

// printable reports whether s is printable ASCII, all that a
// structured-field string holds as it is.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func isBounded(b keyrate.Backend) bool {
	_, ok := b.(backend.Bounded)
	return ok
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
	ev := middleware.Event{Route: m.route, Weight: 1, Context: r.Context(), Request: r}
	sent, err := m.identify(r, &ev)
	if err != nil {
		m.fail(w, r, next, ev, err)
		return
	}
	if m.weight != nil {
		ev.Weight = m.weight(r)
	}
	if m.slots != nil {
		release, ok := m.holdSlot(w, r, next, ev, sent)
		if !ok {
			return
		}
		defer release() // when the handler returns, panics, or its client hangs up
	}
	var began time.Time
	if m.timed {
		began = time.Now()
	}
	// The Decision goes straight into the Event: it is over 500 bytes,
	// and every copy of it shows in the cost of a request.
	var hits *[2]keyrate.Hit // WithTokenBudget's
	if m.tokens {
		ev.Decision, hits, err = m.takeTokens(r, &ev)
	} else {
		err = m.backend.TakeInto(r.Context(), ev.Key, sent, ev.Weight, &ev.Decision)
	}
	if m.timed {
		ev.Duration = time.Since(began)
	}
	if err != nil {
		ev.Decision = keyrate.Decision{}
		m.fail(w, r, next, ev, err)
		return
	}
	d := &ev.Decision
	ev.Shadow = m.shadow && !d.Allowed
	h := w.Header()
	// The fields, and a refusal the default handler writes, take one
	// allocation for their values, sized in New.
	refuse := !d.Allowed && !m.shadow
	f := newFields(m.room[btoi(refuse && m.ownRefusal)])
	m.setHeaders(&f, h, d, ev.Weight, ev.Budgets)
	if m.timed {
		m.hooks.Decided(ev)
	}
	if d.Allowed {
		if (m.refund != nil || m.reserve) && holds(&ev) {
			m.serveSettled(w, r, next, &ev, hits)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	if m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	if d.RetryAfter > 0 {
		f.setRetryAfter(h, ratelimitfield.Seconds(d.RetryAfter))
	}
	if m.ownRefusal {
		writeLimited(w, &ev, &f)
		return
	}
	m.limited(w, r, ev)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// takeTokens decides a token budget's request (WithTokenBudget) in one
// TakeAll: it sets ev.Budgets, and returns the Decision that stands for
// both and the hits, whose keys a settle gives back to.
func (m *Middleware) takeTokens(r *http.Request, ev *middleware.Event) (keyrate.Decision, *[2]keyrate.Hit, error) {
	hits := new([2]keyrate.Hit)
	ds, ok, err := m.backend.TakeAll(r.Context(), adapter.TokenHits(hits, ev.Key, ev.Weight))
	if err != nil {
		return keyrate.Decision{}, nil, err
	}
	ev.Budgets = ds
	return adapter.TokenDecision(ds, ok), hits, nil
}

// identify sets ev's Identity and Key for r and returns the identity as
// the client sent it (see sentIdentity), or returns why it cannot: an error
// wrapping keyrate.ErrInvalidKey.
func (m *Middleware) identify(r *http.Request, ev *middleware.Event) (string, error) {
	if m.ip != nil {
		// The default identity, the client's address (at most 43 bytes),
		// is written straight after the route: one allocation for both.
		var buf [maxRoute + 1 + 64]byte // any route, the separator, an address
		b, err := m.ip.appendKey(append(buf[:0], m.prefix...), r)
		if err != nil {
			return "", fmt.Errorf("%w: httplimit: the key function failed: %w", keyrate.ErrInvalidKey, err)
		}
		ev.Key = string(b)
		ev.Identity = ev.Key[len(m.prefix):]
		return ev.Identity, nil
	}
	id, err := m.key(r)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: httplimit: the key function failed: %w", keyrate.ErrInvalidKey, err)
	case id == "":
		return "", errEmptyIdentity
	}
	// Bounded, the key fits any store and is the client's alone.
	ev.Identity = clientkey.Bound(id)
	ev.Key = ev.Identity
	if m.prefix != "" {
		ev.Key = m.prefix + ev.Identity
	}
	return sentIdentity(r, id), nil
}

// sentIdentity returns the identity a backend's tier function sees for the
// KeyFunc's identity id: the header's value when id is in HeaderKey's form,
// "name=value", for a header HeaderKey reads and r carries with that very
// value; id itself otherwise. Both checks are needed: a KeyFunc of one's
// own may return identities of that form for other reasons, and the value
// alone would then show the tier function part of an identity.
func sentIdentity(r *http.Request, id string) string {
	name, value, ok := strings.Cut(id, "=")
	if !ok {
		return id
	}
	header, ok := keyedHeader(name)
	if !ok {
		return id
	}
	if v := r.Header[header]; len(v) > 0 && v[0] == value {
		return value
	}
	return id
}

// fail answers a request that got no decision: err is the KeyFunc's
// trouble, the backend's, or the client's leaving.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, next http.Handler, ev middleware.Event, err error) {
	ev.Err = err
	if errors.Is(err, middleware.ErrClientGone) {
		// Serving it in any mode would let a client have work done over
		// its limit by giving up on its requests. No one may be there to
		// read the answer; a client still waiting behind a server-side
		// deadline gets one it can act on.
		m.hooks.Failed(ev)
		writeProblem(w, http.StatusServiceUnavailable, detailGone)
		return
	}
	// A request that cannot be placed is refused whatever the failure mode:
	// serving it would let a client go unlimited at will.
	clientCaused := errors.Is(err, keyrate.ErrInvalidKey)
	refuse := clientCaused || m.failure == middleware.FailClosed
	ev.Shadow = m.shadow && refuse
	m.hooks.Failed(ev)
	switch {
	case !refuse || m.shadow:
		m.setPolicy(w.Header())
		next.ServeHTTP(w, r)
	case clientCaused:
		writeProblem(w, http.StatusBadRequest, detailNoIdentity)
	default:
		writeUnavailable(w)
	}
}

// serveSettled serves an admitted request whose events may be given back:
// all of them when WithRefund's function says its response's status should
// not count, or the part of its weight the handler reports it did not use
// (middleware.ReportWeight). It settles once, as the status is written, so
// that the RateLimit fields sent with it say what the request left; a cost
// the handler reports only after that is settled when it returns. A refund
// that fails is reported to OnError and the Observer, with an Err wrapping
// middleware.ErrRefundFailed: the request stays counted.
func (m *Middleware) serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, ev *middleware.Event, hits *[2]keyrate.Hit) {
	// One allocation for the writer, its copy of the Event and the
	// reservation. It is not reused for another request: a handler that
	// keeps its writer or its context past its return, against net/http's
	// rules, must not reach another client's response.
	sw := &statusWriter{ResponseWriter: w, m: m, ev: *ev}
	if ev.Budgets != nil {
		sw.keys = [2]string{hits[0].Key, hits[1].Key}
	}
	if m.reserve {
		sw.res = &sw.reservation
		r = r.WithContext(reservation.In(r.Context(), sw.res, ev.Weight))
	}
	next.ServeHTTP(sw, r)
	// A handler that wrote nothing has its header sent after it returns:
	// still in time to say what the request left.
	sw.settle(sw.status(), sw.code == 0)
}

// statusWriter remembers the status of the response written through it,
// and settles the request's reservation before the status goes out.
type statusWriter struct {
	http.ResponseWriter
	code int // 0 until a final status is written

	m       *Middleware
	ev      middleware.Event
	res     *reservation.Reservation // &reservation, or nil: no cost to report
	given   int                      // the weight given back so far (of the tokens, under a token budget)
	settled bool                     // the status was known: WithRefund has been asked

	keys          [2]string // under a token budget: the requests key, the tokens key
	givenRequests int       // under a token budget: the request given back, 0 or 1

	reservation reservation.Reservation
	f           fields    // the rewritten fields' values, in buf first
	buf         [128]byte // (see fields)
}

// fields returns the room for the values of the fields a settle rewrites.
func (s *statusWriter) fields() *fields {
	if s.f.buf == nil {
		s.f.buf = s.buf[:0]
	}
	return &s.f
}

// holds reports whether an admitted request's decision recorded anything
// that could be given back.
func holds(ev *middleware.Event) bool {
	if ev.Budgets != nil {
		return ev.Budgets[0].Receipt.N() > 0 || ev.Budgets[1].Receipt.N() > 0
	}
	return ev.Decision.Receipt.N() > 0
}

// settle gives back what the request does not keep, once it knows its
// status: all of its weight when WithRefund says so, else what the handler
// reports it left unused and has not been given back yet. Before the
// status is sent (fresh), the RateLimit fields are rewritten to say what
// the request left.
func (s *statusWriter) settle(status int, fresh bool) {
	m, ev := s.m, &s.ev
	if ev.Budgets != nil {
		s.settleTokens(status, fresh)
		return
	}
	left := ev.Decision.Receipt.N()
	give := 0
	switch {
	case left == 0:
		return
	case !s.settled && m.refund != nil && m.refund(status):
		give = left
	case s.res != nil:
		if unused, ok := s.res.Unused(); ok {
			give = min(unused-s.given, left)
		}
	}
	s.settled = true
	if give <= 0 {
		return
	}
	ctx := ev.Context
	err := m.backend.RefundN(ctx, ev.Key, &ev.Decision, give)
	if err != nil {
		ev.Err = err
		m.hooks.Failed(*ev)
		return
	}
	s.given += give
	if fresh {
		m.resetHeaders(s.fields(), s.Header(), &ev.Decision, ev.Weight, s.given)
	}
}

// settleTokens is settle for a token budget's request: WithRefund gives
// back both budgets' events, a reported cost the tokens it did not use.
func (s *statusWriter) settleTokens(status int, fresh bool) {
	m, ev := s.m, &s.ev
	req, tok := &ev.Budgets[0], &ev.Budgets[1]
	all := !s.settled && m.refund != nil && m.refund(status)
	s.settled = true
	give := 0
	switch {
	case all:
		give = tok.Receipt.N()
	case s.res != nil && tok.Receipt.N() > 0:
		if unused, ok := s.res.Unused(); ok {
			give = min(unused-s.given, tok.Receipt.N())
		}
	}
	changed := false
	if all && req.Receipt.N() > 0 {
		n := req.Receipt.N()
		if err := m.backend.RefundN(ev.Context, s.keys[0], req, n); err != nil {
			ev.Err = err
			m.hooks.Failed(*ev)
		} else {
			s.givenRequests, changed = n, true
		}
	}
	if give > 0 {
		if err := m.backend.RefundN(ev.Context, s.keys[1], tok, give); err != nil {
			ev.Err = err
			m.hooks.Failed(*ev)
		} else {
			s.given, changed = s.given+give, true
		}
	}
	if fresh && changed {
		m.resetTokenFields(s.fields(), s.Header(), ev.Budgets, ev.Weight, s.givenRequests, s.given)
	}
}

// status returns the response's status: 200 when the handler wrote no
// header, as net/http sends then.
func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 && code >= 200 { // 1xx are not the response's status
		s.code = code
		s.settle(code, true)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
		s.settle(s.code, true)
	}
	return s.ResponseWriter.Write(b)
}

// Flush passes a flush on, so that a handler that streams still can.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
