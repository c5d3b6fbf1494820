package main

import (
	"encoding/json"
	"fmt"
	"github.com/keyrate/keyrate/middleware/adapter"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/dev/cmd/keyrate-demo/internal/live"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/otellimit"
	"github.com/redis/go-redis/v9"
)

// route is one limited route of the demo: what to request and its budget.
type route struct {
	Name   string // names the budget in keys, RateLimit fields and decisions
	Method string
	Path   string
	// Policies are the route's budget per client: a request is admitted
	// only when it fits every one of them, and then counts against all of
	// them. One unnamed policy is named after the route in the RateLimit
	// fields.
	Policies []keyrate.Policy
	// Pro, when set, are the policies of a client whose API key starts
	// with "pro-" (the pro tier) instead of Policies.
	Pro []keyrate.Policy
	// Requests, when set, make the route a model API's: each request
	// counts at once against Requests, at 1, and against Policies, the
	// tokens budget, at its Cost, or against neither
	// (httplimit.WithTokenBudget); the page draws each budget.
	Requests []keyrate.Policy
	// InFlight, when above 0, is how many requests of a client may run
	// at once (httplimit.WithConcurrency); one more waits up to InFlightWait.
	InFlight     int
	InFlightWait time.Duration
	// FailuresOnly counts only the requests answered 400 or above: the
	// middleware gives back the others' events once they are served
	// (httplimit.WithRefund), in process and in Redis alike.
	FailuresOnly bool
	// Cost, when set, weighs each request (httplimit.WithWeight) in Unit,
	// such as the tokens a model call reserves: its handler reports what
	// the request really cost (middleware.ReportWeight), and the middleware
	// gives back the rest, where the budget can give part of a decision
	// back. Burst is the burst size the live page offers for it.
	Cost  func(*http.Request) int
	Unit  string
	Burst int
	// Form is the form the live page sends as each request's body, each
	// field starting at the value given; Note says on the page what the
	// route's requests do.
	Form    map[string]string
	Note    string
	serve   http.HandlerFunc
	limited func(http.ResponseWriter, *http.Request, middleware.Event) // nil: httplimit's
}

// limit is the one unnamed policy of a route: limit requests per window.
func limit(n int, window time.Duration) []keyrate.Policy {
	return []keyrate.Policy{{Limit: n, Window: window}}
}

// routes are the demo's limited routes: two as in the classic tutorial
// setup (status with a more generous tier for "pro-" keys), "burst" with a
// window short enough to watch the 00:09 / 00:11 boundary burst without
// waiting a minute for the next boundary, "export" under two policies
// at once, a short burst limit and an hourly one, "login", which counts
// failed attempts only, "generate", which reserves a model call's tokens
// and keeps only those it used, and "report", a slow endpoint of
// 2 requests in flight. Each has its own limiter, so its own budget per
// client.
var routes = []route{
	{Name: "status", Method: http.MethodGet, Path: "/api/status", Policies: limit(3, time.Minute), Pro: limit(10, time.Minute), serve: serveStatus},
	{Name: "search", Method: http.MethodGet, Path: "/api/search", Policies: limit(20, time.Minute), serve: serveSearch},
	{Name: "burst", Method: http.MethodGet, Path: "/api/burst", Policies: limit(10, 10*time.Second), serve: serveBurst},
	{Name: "export", Method: http.MethodGet, Path: "/api/export", Policies: []keyrate.Policy{
		{Name: "export-burst", Limit: 2, Window: 10 * time.Second},
		{Name: "export-hourly", Limit: 5, Window: time.Hour},
	}, serve: serveExport},
	{Name: "login", Method: http.MethodPost, Path: "/api/login", Policies: limit(5, 15*time.Minute), FailuresOnly: true,
		Form: map[string]string{"password": "guess"}, Note: fmt.Sprintf("The password %q succeeds; any other fails.", demoPassword), serve: serveLogin},
	generateRoute,
	reportRoute,
}

// proTier names the tier of the clients whose API key starts with "pro-".
const proTier = "pro"

// tierOf is the limiters' tier function. Behind the middleware it gets the
// client's identity as the client sent it: the API key itself, or the
// address of a client without one. It must be cheap: a prefix test.
func tierOf(identity string) string {
	if strings.HasPrefix(identity, "pro-") {
		return proTier
	}
	return ""
}

// describe says a route's policies for people: "3 per 60s", or "2 per 10s
// (export-burst) and 5 per 3600s (export-hourly)"; with a unit, "10000
// tokens per 60s"; a calendar's, "200000 tokens daily in UTC".
func describe(policies []keyrate.Policy, unit string) string {
	var b strings.Builder
	for i, p := range policies {
		if i > 0 {
			b.WriteString(" and ")
		}
		fmt.Fprintf(&b, "%d", p.Limit)
		if unit != "" {
			b.WriteString(" " + unit)
		}
		if p.Calendar == (keyrate.Calendar{}) {
			fmt.Fprintf(&b, " per %gs", p.Window.Seconds())
		} else {
			fmt.Fprintf(&b, " %s", p.Calendar) // "daily in UTC"
		}
		if p.Name != "" {
			fmt.Fprintf(&b, " (%s)", p.Name)
		}
	}
	return b.String()
}

// keyHeader carries a client's API key; without it the client is its IP address.
const keyHeader = "X-API-Key"

// maxKeys bounds each in-process limiter against floods of made-up API
// keys: a full one makes room for a new key by evicting the keys decided
// least recently, and newIdentities keeps one address from forcing that at
// will. A Redis limiter's keys expire in Redis once idle for a window.
const maxKeys = 100_000

// decision is one decided request, as every subscriber sees it.
type decision struct {
	At       time.Time
	Route    string // a route's Name
	Key      string // the client as shownIdentity shows it: "x-api-key=2bd806c9" (alice's fingerprint) or "127.0.0.1"
	Decision keyrate.Decision
	Err      error // the limiter failed; Decision is zero
	// Cost is the weight of the decision's request: 1, or what the route's
	// Cost says.
	Cost int
	// Refund, when set, says that this is no decision but the refund of
	// one: Given of the events of the admitted decision whose Receipt it
	// is (as it stood before) were given back, all of them or part, and
	// Decision is the client's budget once they were. Settle says that
	// the refund settles a reserved cost (route.Cost) rather than giving
	// back a request that should not count (route.FailuresOnly).
	Refund *keyrate.Receipt
	Given  int
	Settle bool
	// Budgets, on a route of several budgets (route.Requests,
	// route.InFlight), are each one as it stands after the decision.
	Budgets []live.Budget
}

type config struct {
	// TrustedProxies is how many reverse proxies stand in front of the
	// server, appending to X-Forwarded-For. 0: the header is ignored.
	TrustedProxies int
	// OnDecision receives every decision, on the request's goroutine, before
	// the response is written. The log is its first subscriber; fan out
	// from here to add others.
	OnDecision func(decision)
	// Clock is the in-process limiters' clock; nil is the system clock.
	// Redis limiters read the Redis server's clock.
	Clock keyrate.Clock
	// Redis, when set, keeps every budget in the Redis server it reaches,
	// so that every demo process using it shares them. nil: each budget
	// lives in this process. The caller closes it after the server stops.
	Redis redis.UniversalClient
	// RedisAddr is Redis's address, for the start-up hints, as shownRedis
	// shows it: never with a password.
	RedisAddr string
	// RedisFallback, when above 0, is the share of each limit that this
	// process admits on its own while Redis cannot answer
	// (redislimit.WithLocalFallback). 0: none, requests are served
	// unlimited then.
	RedisFallback float64
	// Timeouts are the server's; zero fields get defaultTimeouts'.
	Timeouts timeouts
	// Conns bound the connections the server holds; zero fields get
	// defaultConnLimits'.
	Conns connLimits
	// Telemetry says where run exports the OpenTelemetry metrics; by
	// default, nowhere.
	Telemetry telemetry
	// onConnState, when set, sees each change of a connection's state
	// after the connection caps have: for tests, to wait until the
	// server holds a connection idle.
	onConnState func(net.Conn, http.ConnState)
	// otel, when set, observes every route beside the Prometheus metrics:
	// run sets it from Telemetry.
	otel *otellimit.Metrics
}

// newServer assembles the demo: a mux with each route behind its own
// limiter, in process or in cfg.Redis, and the limiters' metrics at
// /metrics. close releases the in-process limiters once the server has
// stopped. "/" is left unrouted (404) for a front page.
func newServer(cfg config) (h http.Handler, close func(), err error) {
	ip, err := httplimit.ClientIP(httplimit.IPConfig{TrustHops: cfg.TrustedProxies})
	if err != nil {
		return nil, nil, err
	}
	stats, err := newMetrics()
	if err != nil {
		return nil, nil, err
	}
	a := &assembly{cfg: cfg, identity: httplimit.HeaderKey(keyHeader, ip), stats: stats, publish: cfg.OnDecision,
		budgets: store{redis: cfg.Redis, clock: cfg.Clock, fallback: cfg.RedisFallback}}
	if a.publish == nil {
		a.publish = func(decision) {}
	}
	// One Observer per middleware: the Prometheus metrics, and beside them
	// the OpenTelemetry ones when they are exported.
	a.observer = stats
	if cfg.otel != nil {
		a.observer = observers{stats, cfg.otel}
	}
	if a.newcomers, err = a.budgets.newIdentities(a.identity, ip); err != nil {
		return nil, nil, err
	}
	if a.newcomers != nil {
		a.limiters = append(a.limiters, a.newcomers.budget, a.newcomers.charged)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+metricsPath, stats.handler)
	for _, rt := range routes {
		h, err := a.route(rt)
		if err != nil {
			a.close()
			return nil, nil, err
		}
		mux.Handle(rt.Method+" "+rt.Path, h)
	}
	return mux, a.close, nil
}

// assembly is what newServer builds the routes with, and what it has
// built that close releases.
type assembly struct {
	cfg       config
	identity  httplimit.KeyFunc // a client: its API key, else its address
	stats     *metrics
	observer  middleware.Observer
	publish   func(decision)
	budgets   store
	newcomers *newIdentities // nil with Redis
	limiters  []*keyrate.Limiter
	stores    []io.Closer // the in-flight stores
}

// close releases the in-process limiters and the in-flight stores.
func (a *assembly) close() {
	for _, l := range a.limiters {
		l.Close()
	}
	for _, c := range a.stores {
		c.Close()
	}
}

// route returns rt's handler behind its own limiter, its keys counted in
// the metrics.
func (a *assembly) route(rt route) (http.Handler, error) {
	b, local, err := a.budgets.backend(rt)
	if err != nil {
		return nil, err
	}
	if local != nil {
		a.limiters = append(a.limiters, local)
		if err := a.stats.TrackKeys(rt.Name, local); err != nil {
			return nil, err
		}
		if a.cfg.otel != nil {
			if err := a.cfg.otel.TrackKeys(rt.Name, local); err != nil {
				return nil, err
			}
		}
	}
	opts, b, err := a.options(rt, b)
	if err != nil {
		return nil, err
	}
	m, err := httplimit.New(b, opts...)
	if err != nil {
		return nil, err
	}
	h := m.Handler(rt.serve)
	if local != nil {
		suffix := ""
		if rt.Requests != nil {
			suffix = adapter.RequestsSuffix // every admitted request counts there
		}
		h = a.newcomers.handler(rt.Name, suffix, local, h)
	}
	return h, nil
}

// options returns the middleware options of rt over its backend b, and
// the backend to give the middleware: b, or b behind a refund reporter
// that publishes what it gives back.
func (a *assembly) options(rt route, b keyrate.Backend) ([]httplimit.Option, keyrate.Backend, error) {
	hook := a.hook(false, nil)
	opts := []httplimit.Option{
		httplimit.WithRoute(rt.Name),
		httplimit.WithKeyFunc(a.identity),
		httplimit.WithOnError(hook),
		httplimit.WithObserver(a.observer),
	}
	if rt.Requests != nil {
		opts = append(opts, httplimit.WithTokenBudget(),
			httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.TokenHeaders))
	}
	var slots *countedSlots
	if rt.InFlight > 0 {
		var err error
		if slots, err = a.budgets.inFlight(rt); err != nil {
			return nil, nil, err
		}
		a.stores = append(a.stores, slots)
		opts = append(opts, httplimit.WithConcurrency(slots, rt.InFlightWait))
	}
	if rt.Requests != nil || slots != nil {
		hook = a.hook(true, slots)
	}
	opts = append(opts, httplimit.WithOnDecision(hook))
	if rt.FailuresOnly || rt.Cost != nil {
		var err error
		if b, err = newRefundReporter(b, rt, a.publish); err != nil {
			return nil, nil, err
		}
	}
	if rt.FailuresOnly {
		opts = append(opts, httplimit.WithRefund(countsNot))
	}
	if rt.Cost != nil {
		opts = append(opts, httplimit.WithWeight(rt.Cost))
	}
	if rt.limited != nil {
		opts = append(opts, httplimit.WithLimitedHandler(rt.limited))
	}
	return opts, b, nil
}

// hook returns the middleware hook that publishes each decision. With
// budgets, for a route of several (a token budget, slots in flight), it
// publishes each budget too: for a token budget, the tokens budget's
// decision as the request's verdict.
func (a *assembly) hook(budgets bool, slots *countedSlots) func(middleware.Event) {
	return func(e middleware.Event) {
		d := decision{At: time.Now(), Route: e.Route, Key: shownIdentity(e.Identity), Decision: e.Decision, Err: e.Err, Cost: e.Weight}
		switch {
		case !budgets:
		case e.Budgets != nil:
			d.Decision, d.Budgets = tokensVerdict(e), budgetsOf(e, slots)
		case slots != nil && e.Err == nil:
			d.Budgets = slotBudgets(e, slots)
		}
		a.publish(d)
	}
}

func serveStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"status": "ok", "time": time.Now().UTC().Format(time.RFC3339)})
}

func serveSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("q")
	writeJSON(w, map[string]any{"query": q, "results": []string{
		fmt.Sprintf("%s: the first result", q),
		fmt.Sprintf("%s: another result", q),
	}})
}

// serveExport stands for an expensive call, worth a burst limit and an
// hourly one.
func serveExport(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"export": "ok", "rows": 3, "time": time.Now().UTC().Format(time.RFC3339)})
}

// serveBurst answers with the time to the millisecond, so the requests of a
// burst can be told apart.
func serveBurst(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"burst": "ok", "time": time.Now().UTC().Format(time.RFC3339Nano)})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
