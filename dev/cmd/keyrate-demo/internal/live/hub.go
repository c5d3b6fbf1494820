// Package live streams the demo server's rate-limit decisions to a browser
// page that draws them: every request as a mark on a time axis, the sliding
// window moving across them, and beside it what a fixed window would have
// admitted for the same requests.
//
// A Hub is fed one call per decision (Record, or RecordN for a request of
// some weight), and one per decision given back, wholly or in part
// (RecordRefund, RecordRefundN), and serves three things: the page itself, embedded
// in the binary and working offline; a JSON description of the limited
// routes; and a Server-Sent Events stream of decisions and refunds. Recording never waits for a browser: each subscriber has a
// bounded buffer, and a subscriber that falls behind loses events (counted,
// and reported to it) instead of slowing the requests being decided.
package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// Route describes one limited route to the page: what to request and the
// budget it has, so the page can draw the window and simulate a fixed one.
type Route struct {
	// Name is the route name the decision hook reports, such as "status".
	Name string
	// Method and Path are what the page's buttons request, such as "GET" and
	// "/api/status". Method defaults to GET.
	Method string
	Path   string
	// Policies are the route's budget: a request is admitted only when it
	// fits every one of them. One policy, Limit
	// requests per key in any Window, gets a sliding lane and a simulated
	// fixed window beside it; several get a lane each, to show which one
	// refused, and must be named. A key may be under other policies (a
	// tier): the page draws each key with the policies its decisions
	// report, and these until it has one.
	Policies []keyrate.Policy
	// Refunds tells the page that the route gives some requests back
	// (RecordRefund), such as a login whose attempt succeeded: it then
	// counts and draws them apart.
	Refunds bool
	// Unit, when set, is what the route's requests weigh in (RecordN),
	// such as "tokens": the page draws each request as a bar of its
	// weight, counts the unit rather than requests, and shows what a
	// request reserved, gave back (RecordRefundN) and finally cost.
	// Default: none, each request weighs 1.
	Unit string
	// Burst is the burst size the page offers, at most 200. Default: the
	// route's smallest limit, the burst it admits in full when its windows
	// are empty; a route whose requests weigh more than 1 sets one.
	Burst int
	// Form, when set, is the form the page sends as the body of each of
	// its requests to the route (application/x-www-form-urlencoded): a
	// field per name, each starting at its value here and editable on the
	// page, such as a password to try.
	Form map[string]string
	// Note is shown on the page while the route is chosen, to say what
	// its requests do, such as which password succeeds.
	Note string
}

// Config configures a Hub. Only Routes is required.
type Config struct {
	// Routes are the limited routes the page offers, in the order shown.
	Routes []Route
	// KeyHeader is the request header that carries a client's identity; the
	// page sends its chosen key in it. Default: X-API-Key.
	KeyHeader string
	// ShowKey returns the key Record is given for the requests that carry
	// value in KeyHeader, so that the page can pick out the decisions for
	// the key it sends: it asks the Hub (at KeyPath) instead of working the
	// key out itself. Every key Record gets goes to every browser on the
	// page, so a key that is a credential should be recorded, and shown
	// here, as a fingerprint. Default: the value itself.
	ShowKey func(value string) string
	// Buffer is how many events each subscriber may have queued before
	// further events are dropped for it. Default: 512. A larger buffer
	// rides out longer stalls of a browser at 200 bytes or so per event.
	Buffer int
	// History is how many recent events a new subscriber receives first, so
	// a page opened after some traffic still shows it. Default: 1000; a
	// negative value keeps none. Each costs one encoded event of memory.
	History int
	// MaxSubscribers bounds the number of open event streams. Once it is
	// reached, a new stream takes the place of the oldest stream of the
	// clients holding the most, which ends (its page reconnects, after
	// the last event it saw): a newcomer always gets a stream, from any
	// number of addresses, and a stream lasts only until MaxSubscribers
	// newer ones have been opened, or MaxStreamAge. Default: 32.
	MaxSubscribers int
	// MaxSubscribersPerClient bounds the open event streams of one client,
	// as ClientOf names it, so that one client cannot take every stream;
	// its further requests get 503 while other clients still get streams.
	// Default: 4 (a page open in a few tabs).
	MaxSubscribersPerClient int
	// ClientOf names the client a request comes from, for
	// MaxSubscribersPerClient. Default: the IP address of the request's
	// RemoteAddr, an IPv6 address by its /64 (a host can pick any address
	// in it), or RemoteAddr as it is when it holds no IP address. Behind a
	// reverse proxy, pass what reads the client from the proxy's headers.
	ClientOf func(r *http.Request) string
	// KeepAlive is how often an idle stream gets a tick event carrying the
	// server time, which keeps proxies from closing it and lets the page
	// correct its clock. Default: 10s.
	KeepAlive time.Duration
	// WriteTimeout bounds each write to a subscriber; a browser that stops
	// reading for longer is disconnected. Default: 10s.
	WriteTimeout time.Duration
	// MaxStreamAge ends a stream that has been open that long; the browser
	// opens a new one within seconds (the stream's retry), resuming after
	// the last event it saw, so that no client holds a place for good.
	// Default: 10 minutes.
	MaxStreamAge time.Duration
}

// Hub collects decisions and streams them to the page. Create one with New,
// register its handlers with Register, feed it with Record, and Close it
// before shutting the server down so that open streams end.
type Hub struct {
	cfg     Config
	routes  configJSON // the /live/config body, less the server time
	dropped atomic.Uint64

	mu      sync.Mutex
	seq     uint64
	history []sent // ring of recent decision frames, oldest at head
	head    int
	subs    map[*subscriber]struct{}
	clients map[string]int // open streams per client, for clients with any
	opened  uint64         // streams opened, which orders them by age
	closed  bool
	done    chan struct{}
}

// ErrConfig is wrapped by every error New returns.
var ErrConfig = errors.New("live: invalid configuration")

// New validates cfg, fills in its defaults and returns a Hub.
func New(cfg Config) (*Hub, error) {
	if len(cfg.Routes) == 0 {
		return nil, fmt.Errorf("%w: no routes", ErrConfig)
	}
	seen := make(map[string]bool)
	routes := make([]Route, len(cfg.Routes))
	for i, r := range cfg.Routes {
		if r.Method == "" {
			r.Method = http.MethodGet
		}
		switch {
		case r.Name == "":
			return nil, fmt.Errorf("%w: route %d has no name", ErrConfig, i)
		case seen[r.Name]:
			return nil, fmt.Errorf("%w: route name %q used twice", ErrConfig, r.Name)
		case !strings.HasPrefix(r.Path, "/"):
			return nil, fmt.Errorf("%w: route %q: path %q does not start with /", ErrConfig, r.Name, r.Path)
		}
		if err := checkPolicies(r); err != nil {
			return nil, err
		}
		if r.Burst < 0 || r.Burst > maxBurst {
			return nil, fmt.Errorf("%w: route %q: burst is %d, want 0 to %d", ErrConfig, r.Name, r.Burst, maxBurst)
		}
		seen[r.Name] = true
		r.Policies = slices.Clone(r.Policies)
		r.Form = maps.Clone(r.Form)
		routes[i] = r
	}
	cfg.Routes = routes
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = "X-API-Key"
	}
	if cfg.ShowKey == nil {
		cfg.ShowKey = func(v string) string { return v }
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 512
	}
	if cfg.History == 0 {
		cfg.History = 1000
	}
	if cfg.History < 0 {
		cfg.History = 0
	}
	if cfg.MaxSubscribers <= 0 {
		cfg.MaxSubscribers = 32
	}
	if cfg.MaxSubscribersPerClient <= 0 {
		cfg.MaxSubscribersPerClient = 4
	}
	if cfg.ClientOf == nil {
		cfg.ClientOf = remoteClient
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 10 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.MaxStreamAge <= 0 {
		cfg.MaxStreamAge = 10 * time.Minute
	}
	return &Hub{
		cfg:     cfg,
		routes:  describe(cfg),
		subs:    make(map[*subscriber]struct{}),
		clients: make(map[string]int),
		done:    make(chan struct{}),
	}, nil
}

// checkPolicies validates a route's policies, as the page needs them.
func checkPolicies(r Route) error {
	n := len(r.Policies)
	if n < 1 || n > backend.MaxPolicies {
		return fmt.Errorf("%w: route %q has %d policies, want 1 to %d", ErrConfig, r.Name, n, backend.MaxPolicies)
	}
	names := make(map[string]bool, n)
	for i, p := range r.Policies {
		switch {
		case p.Limit < 1:
			return fmt.Errorf("%w: route %q: policy %d: limit is %d, want >= 1", ErrConfig, r.Name, i, p.Limit)
		case p.Calendar == (keyrate.Calendar{}) && p.Window < time.Millisecond:
			return fmt.Errorf("%w: route %q: policy %d: window is %v, want >= 1ms", ErrConfig, r.Name, i, p.Window)
		case n > 1 && p.Name == "":
			return fmt.Errorf("%w: route %q: policy %d has no name; each of several policies needs one", ErrConfig, r.Name, i)
		case names[p.Name]:
			return fmt.Errorf("%w: route %q: policy name %q used twice", ErrConfig, r.Name, p.Name)
		}
		names[p.Name] = true
	}
	return nil
}

// event is one decision as the page receives it. Times are Unix
// milliseconds, durations milliseconds, both with fractions. The top-level
// numbers are the binding policy's (see keyrate.Decision); Policies has
// every policy's.
type event struct {
	Seq          uint64        `json:"seq"`
	At           float64       `json:"at"`
	Route        string        `json:"route"`
	Key          string        `json:"key"`
	Allowed      bool          `json:"allowed"`
	Policy       string        `json:"policy,omitempty"`
	Limit        int           `json:"limit"`
	Remaining    int           `json:"remaining"`
	RetryAfterMs float64       `json:"retryAfterMs"`
	ResetAfterMs float64       `json:"resetAfterMs"`
	Overflow     bool          `json:"overflow,omitempty"`
	Policies     []policyEvent `json:"policies,omitempty"`
	// Receipt names what an admitted decision recorded, so that a refund
	// event can say which decision it gave back; "" when it recorded
	// nothing. A refund's is the decision's as it stood before it.
	Receipt string `json:"receipt,omitempty"`
	// Weight is, for a decision, the weight its request asked for (1 on
	// a route that does not weigh requests); for a refund, what the
	// decision held before it.
	Weight int `json:"weight"`
	// Given is what a refund gave back, at most Weight; Rest names what
	// the decision still holds after it, as the next refund of it will
	// name it, "" when nothing (the whole decision was given back).
	Given int    `json:"given,omitempty"`
	Rest  string `json:"rest,omitempty"`
	// Budgets, on a route whose requests count against several budgets
	// at once, are each budget as it stands after the event.
	Budgets []Budget `json:"budgets,omitempty"`
}

// Budget is one of the budgets a route's request counts against at once,
// as the page shows it beside the route's lanes: a model API's requests a
// minute, tokens a minute, and requests in flight.
type Budget struct {
	Name      string `json:"name"`
	Unit      string `json:"unit"`
	Limit     int    `json:"limit"`
	Remaining int    `json:"remaining"`
	// Allowed is false for the budget that refused the request.
	Allowed bool `json:"allowed"`
	// WindowMs is the budget's binding window, 0 for one without (slots
	// in flight); ResetAfterMs how long until it is empty.
	WindowMs     float64 `json:"windowMs,omitempty"`
	ResetAfterMs float64 `json:"resetAfterMs,omitempty"`
}

// maxBurst is the largest burst the page sends at once.
const maxBurst = 200

// policyEvent is one policy's part of a decision (keyrate.PolicyDecision).
type policyEvent struct {
	Name          string  `json:"name"`
	Limit         int     `json:"limit"`
	WindowMs      float64 `json:"windowMs"`
	Allowed       bool    `json:"allowed"`
	Remaining     int     `json:"remaining"`
	RetryAfterMs  float64 `json:"retryAfterMs"`
	RefillAfterMs float64 `json:"refillAfterMs"`
	ResetAfterMs  float64 `json:"resetAfterMs"`
}

func policyEvents(d *keyrate.Decision) []policyEvent {
	parts := d.Policies()
	if len(parts) == 0 {
		return nil
	}
	out := make([]policyEvent, 0, len(parts))
	for _, p := range parts {
		if p.Calendar != (keyrate.Calendar{}) {
			continue // a quota, not a lane: the budgets say it (see routeJSON.Quotas)
		}
		out = append(out, policyEvent{
			Name:          p.Name,
			Limit:         p.Limit,
			WindowMs:      millis(p.Window),
			Allowed:       p.Allowed,
			Remaining:     p.Remaining,
			RetryAfterMs:  millis(p.RetryAfter),
			RefillAfterMs: millis(p.RefillAfter),
			ResetAfterMs:  millis(p.ResetAfter),
		})
	}
	return out
}

// Record publishes one decision, taken at the instant at, for key on the
// named route. It never blocks on a subscriber: one whose buffer is full
// misses the event, and the miss is counted (see Dropped). It is safe for
// concurrent use and does nothing after Close.
func (h *Hub) Record(route, key string, d keyrate.Decision, at time.Time) {
	h.RecordN(route, key, 1, d, at)
}

// RecordN is Record of the decision of a request of weight n (its cost,
// such as the tokens a model call reserves), on a route whose requests
// are weighed (Route.Unit); budgets, when given, are each budget the
// request counts against, as it stands after d, for the page to show.
func (h *Hub) RecordN(route, key string, n int, d keyrate.Decision, at time.Time, budgets ...Budget) {
	e := newEvent(route, key, d, at, d.Receipt)
	e.Weight, e.Budgets = n, budgets
	h.publish("decision", e)
}

// RecordRefund publishes that the events of an admitted decision recorded
// for key on the named route, the one whose Receipt was r, were given back
// at the instant at; after is the key's budget once they were (such as a
// Peek). The page then stops counting that decision's request. It
// behaves as Record does towards subscribers.
func (h *Hub) RecordRefund(route, key string, r keyrate.Receipt, after keyrate.Decision, at time.Time) {
	h.RecordRefundN(route, key, r, r.N(), after, at)
}

// RecordRefundN is RecordRefund of n of the decision's events, the part of
// its weight a request did not use (keyrate.Limiter.RefundN); r is the
// decision's Receipt as it stood before, so that the page finds the
// request, which keeps counting what is left; budgets are as for RecordN. An n of all that r holds is
// RecordRefund. An n outside 1 to r.N() publishes nothing: no refund gives
// back more than its decision holds.
func (h *Hub) RecordRefundN(route, key string, r keyrate.Receipt, n int, after keyrate.Decision, at time.Time, budgets ...Budget) {
	if n < 1 || n > r.N() {
		return
	}
	e := newEvent(route, key, after, at, r)
	e.Weight, e.Given, e.Budgets = r.N(), n, budgets
	if n < r.N() {
		e.Rest = receiptID(backend.NewReceipt(backend.ReceiptAt(r), r.N()-n, backend.ReceiptID(r)))
	}
	h.publish("refund", e)
}

// newEvent returns the event of decision d for key on route at the instant
// at, naming receipt r; publish numbers it.
func newEvent(route, key string, d keyrate.Decision, at time.Time, r keyrate.Receipt) event {
	return event{
		At:           unixMillis(at),
		Route:        route,
		Key:          key,
		Allowed:      d.Allowed,
		Policy:       d.Policy,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMs: millis(d.RetryAfter),
		ResetAfterMs: millis(d.ResetAfter),
		Overflow:     d.Overflow,
		Policies:     policyEvents(&d),
		Receipt:      receiptID(r),
	}
}

// publish sends e as one event named name (decision or refund) to every
// subscriber and keeps it for later ones.
func (h *Hub) publish(name string, e event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || (h.cfg.History == 0 && len(h.subs) == 0) {
		return
	}
	h.seq++
	e.Seq = h.seq
	frame := eventFrame(name, e)
	if h.cfg.History > 0 {
		if len(h.history) < h.cfg.History {
			h.history = append(h.history, sent{h.seq, frame})
		} else {
			h.history[h.head] = sent{h.seq, frame}
			h.head = (h.head + 1) % len(h.history)
		}
	}
	for s := range h.subs {
		select {
		case s.frames <- frame:
		default:
			s.dropped.Add(1)
			h.dropped.Add(1)
		}
	}
}

// receiptID names a Receipt for the page: the same for a decision and for
// the refund of it. "" for the zero Receipt.
func receiptID(r keyrate.Receipt) string {
	if r.N() == 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", backend.ReceiptAt(r).UnixNano(), r.N(), backend.ReceiptID(r))
}

// Dropped returns how many events have been dropped, over all subscribers,
// because a subscriber's buffer was full.
func (h *Hub) Dropped() uint64 { return h.dropped.Load() }

// Subscribers returns the number of open event streams.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Close ends every open event stream and makes later ones fail with 503,
// so that http.Server.Shutdown is not held up by browsers that stay
// connected. It is idempotent. Record does nothing after Close.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// subscriber is one open event stream.
type subscriber struct {
	client  string // as Config.ClientOf names it
	n       uint64 // the order it was opened in
	frames  chan []byte
	dropped atomic.Uint64
	// ended is closed when a newer stream takes its place.
	ended chan struct{}
}

// sent is a decision frame kept for subscribers that connect later.
type sent struct {
	seq   uint64
	frame []byte
}

// subscribe registers a subscriber for client and returns it with the
// history it must send first: the events after lastID, the last event id a
// reconnecting browser saw, or all of them for a new browser or one whose
// id is from before a restart. Both are taken under one lock, so nothing is
// seen twice or missed in between.
func (h *Hub) subscribe(lastID uint64, client string) (*subscriber, [][]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, errClosed
	}
	if h.clients[client] >= h.cfg.MaxSubscribersPerClient {
		return nil, nil, errClientBusy
	}
	if len(h.subs) >= h.cfg.MaxSubscribers {
		h.makeRoom()
	}
	h.opened++
	s := &subscriber{client: client, n: h.opened, frames: make(chan []byte, h.cfg.Buffer), ended: make(chan struct{})}
	h.subs[s] = struct{}{}
	h.clients[client]++
	if lastID > h.seq {
		lastID = 0
	}
	past := make([][]byte, 0, len(h.history))
	for _, part := range [][]sent{h.history[h.head:], h.history[:h.head]} {
		for _, e := range part {
			if e.seq > lastID {
				past = append(past, e.frame)
			}
		}
	}
	return s, past, nil
}

// makeRoom ends the oldest stream of the clients holding the most, so
// that a newcomer takes its place. Every stream is idle from its client's
// side (the server alone writes), so age decides: the one held longest
// gives way, and per-client fairness still takes it from a client with
// more than others first. Called with mu held, with a stream open.
func (h *Hub) makeRoom() {
	most := 0
	for _, k := range h.clients {
		most = max(most, k)
	}
	var oldest *subscriber
	for s := range h.subs {
		if h.clients[s.client] == most && (oldest == nil || s.n < oldest.n) {
			oldest = s
		}
	}
	h.remove(oldest)
	close(oldest.ended)
}

func (h *Hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(s)
}

// remove takes s out of the subscribers once; called with mu held.
func (h *Hub) remove(s *subscriber) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	if h.clients[s.client]--; h.clients[s.client] == 0 {
		delete(h.clients, s.client)
	}
}

var (
	errClosed     = errors.New("live: hub closed")
	errClientBusy = errors.New("live: too many event streams from this client")
)

// remoteClient is the default Config.ClientOf: the IP address of
// r.RemoteAddr, an IPv6 one as its /64.
func remoteClient(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	a := ap.Addr().Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func unixMillis(t time.Time) float64 {
	return float64(t.UnixMicro()) / 1e3
}

func millis(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1e3
}

// eventFrame encodes e as one SSE message of the given event name. JSON
// never contains a raw newline, so a single data line carries it.
func eventFrame(name string, e event) []byte {
	body, err := json.Marshal(e)
	if err != nil { // cannot happen for this struct; keep the stream well formed anyway
		body = []byte(`{}`)
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, name, body)
}

// controlFrame encodes a message the page uses to keep its clock and
// bookkeeping right (hello, tick, dropped).
func controlFrame(name string, now time.Time, dropped uint64) []byte {
	return fmt.Appendf(nil, "event: %s\ndata: {\"now\":%.3f,\"dropped\":%d}\n\n", name, unixMillis(now), dropped)
}
