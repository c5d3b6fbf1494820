package benchmarks

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/didip/tollbooth/v7"
	"github.com/go-chi/httprate"
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	golimithttp "github.com/sethvargo/go-limiter/httplimit"
)

// HTTPPeer is one rate limiting middleware for net/http, built to a budget
// of Limit requests per Window per client address: RemoteAddr without its
// port, whatever the request's headers say.
type HTTPPeer struct {
	// Name is the short name used in benchmark names and tables.
	Name string
	// Module is the Go module (and version) measured.
	Module string
	// Headers is what the middleware writes on every response by default;
	// each keeps its default, as a user who adds it would.
	Headers string
	// New wraps next in the middleware. close releases what it started.
	New func(c Config, next http.Handler) (h http.Handler, close func(), err error)
}

// HTTPPeers lists keyrate's httplimit first, then the peers it is compared
// with.
var HTTPPeers = []HTTPPeer{
	{
		Name:    "httplimit",
		Module:  "github.com/keyrate/keyrate/httplimit over *keyrate.Limiter",
		Headers: "RateLimit-Policy, RateLimit",
		New:     newHTTPLimit,
	},
	{
		Name:    "httprate",
		Module:  "github.com/go-chi/httprate v0.16.1 LimitBy",
		Headers: "X-RateLimit-Limit, -Remaining, -Reset",
		New:     newHTTPRateMiddleware,
	},
	{
		Name:    "tollbooth",
		Module:  "github.com/didip/tollbooth/v7 v7.0.2 LimitHandler",
		Headers: "X-Rate-Limit-Limit, -Duration, -Request-Remote-Addr, RateLimit-Limit, -Reset, -Remaining",
		New:     newTollbooth,
	},
	{
		Name:    "golimiter",
		Module:  "github.com/sethvargo/go-limiter v0.7.1 httplimit over memorystore",
		Headers: "X-RateLimit-Limit, -Remaining, -Reset",
		New:     newGoLimiterMiddleware,
	},
}

// HTTPRoute is the path of every request and the route name httplimit is
// given.
const HTTPRoute = "/api/search"

// newHTTPLimit: httplimit with the in-process limiter passed directly, one
// named route, and its default identity (ClientIP: the socket's address).
func newHTTPLimit(c Config, next http.Handler) (http.Handler, func(), error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	l, err := keyrate.New(c.Limit, c.Window)
	if err != nil {
		return nil, nil, err
	}
	m, err := httplimit.New(l, httplimit.WithRoute("search"))
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return m.Handler(next), func() { l.Close() }, nil
}

// remoteIP is httprate's key: the socket's address without its port, IPv6
// grouped by /64 (httprate.CanonicalizeIP). httprate leaves resolving the
// client to the caller; this is what its deprecated KeyByIP did.
func remoteIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return "", err
	}
	return httprate.CanonicalizeIP(host), nil
}

func newHTTPRateMiddleware(c Config, next http.Handler) (http.Handler, func(), error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	return httprate.LimitBy(c.Limit, c.Window, remoteIP)(next), func() {}, nil
}

// newTollbooth: a token bucket of burst Limit refilled at Limit per Window,
// keyed by RemoteAddr alone (its default also reads X-Forwarded-For and
// X-Real-IP, which the client chooses).
func newTollbooth(c Config, next http.Handler) (http.Handler, func(), error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	lmt := tollbooth.NewLimiter(float64(c.Limit)/c.Window.Seconds(), nil).
		SetBurst(c.Limit).
		SetIPLookups([]string{"RemoteAddr"})
	return tollbooth.LimitHandler(lmt, next), func() {}, nil
}

// newGoLimiterMiddleware: go-limiter's httplimit over its memorystore, keyed
// by IPKeyFunc with no headers: RemoteAddr without its port.
func newGoLimiterMiddleware(c Config, next http.Handler) (http.Handler, func(), error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	store, err := memorystore.New(&memorystore.Config{Tokens: uint64(c.Limit), Interval: c.Window})
	if err != nil {
		return nil, nil, err
	}
	m, err := golimithttp.NewMiddleware(store, golimithttp.IPKeyFunc())
	if err != nil {
		store.Close(context.Background())
		return nil, nil, err
	}
	return m.Handle(next), func() { store.Close(context.Background()) }, nil
}

// ClientAddr is the address of client i: counting up from 198.18.0.0, the
// range set aside for benchmarks (RFC 2544). Nothing is ever sent to it.
func ClientAddr(i int) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], (198<<24|18<<16)+uint32(i))
	return netip.AddrFrom4(b)
}

// ClientRequests returns GET requests for HTTPRoute from clients from to
// from+n-1, one request each, port 40000. They share one base request (its
// URL, header map and context), so handlers must only read them.
func ClientRequests(from, n int) []*http.Request {
	base := httptest.NewRequest(http.MethodGet, HTTPRoute, nil)
	rs := make([]*http.Request, n)
	for i := range rs {
		r := base.WithContext(base.Context())
		r.RemoteAddr = netip.AddrPortFrom(ClientAddr(from+i), 40000).String()
		rs[i] = r
	}
	return rs
}
