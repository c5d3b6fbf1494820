package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// plan is one load run, as the flags describe it.
type plan struct {
	target   string // URL
	method   string
	rate     int // requests per second
	duration time.Duration
	timeout  time.Duration
	header   string   // carries the identity
	keys     []string // identities; none means requests carry no header
	random   bool     // pick identities at random instead of in turn
	seed     uint64
	window   time.Duration // 0: take it from RateLimit-Policy, if any
	limit    int           // 0: take it from RateLimit-Policy, if any
}

func (p plan) validate() error {
	u, err := url.Parse(p.target)
	switch {
	case p.target == "":
		return errors.New("-url is required, for example -url http://127.0.0.1:8080/api/status")
	case err != nil:
		return fmt.Errorf("-url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("-url %q: want an absolute http or https URL", p.target)
	case p.rate < 1:
		return fmt.Errorf("-rate is %d, want at least 1 request per second", p.rate)
	case p.duration <= 0:
		return fmt.Errorf("-duration is %v, want > 0", p.duration)
	case p.timeout <= 0:
		return fmt.Errorf("-timeout is %v, want > 0", p.timeout)
	case p.window < 0:
		return fmt.Errorf("-window is %v, want >= 0", p.window)
	case p.limit < 0:
		return fmt.Errorf("-limit is %d, want >= 0", p.limit)
	case len(p.keys) > 0 && p.header == "":
		return errors.New("-header is empty but identities were given")
	}
	for _, k := range p.keys {
		if k == "" {
			return errors.New("-keys contains an empty identity")
		}
	}
	return nil
}

// hit is one request's outcome, attributed to its identity.
type hit struct {
	identity int // index into plan.keys; -1 when unknown (no reply)
	code     int // 0 when no reply
	sent     time.Time
	latency  time.Duration
	policy   string // the reply's RateLimit-Policy field
	err      string
}

func (h hit) span() Span { return Span{h.sent, h.sent.Add(h.latency)} }

// identityTag is a header the client's transport adds to each reply, never
// sent on the wire, naming the identity the request carried: vegeta's
// Result keeps the reply's headers but not the request's.
const identityTag = "X-Keyrate-Load-Identity"

type tagIdentity struct {
	base   http.RoundTripper
	header string
}

func (t tagIdentity) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if resp != nil {
		resp.Header.Set(identityTag, r.Header.Get(t.header))
	}
	return resp, err
}

// defaultTransport is vegeta's own client setup: keep-alive connections,
// enough idle ones per host that a high rate never redials.
func defaultTransport() http.RoundTripper {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: vegeta.DefaultConnections,
		MaxConnsPerHost:     vegeta.DefaultMaxConnections,
	}
}

// targeter hands out requests with identities in turn, or at random from a
// seeded source so that a run can be repeated. Vegeta calls it from many
// workers at once.
func targeter(p plan) vegeta.Targeter {
	var next atomic.Uint64
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(p.seed, p.seed^0x9e3779b97f4a7c15))
	return func(t *vegeta.Target) error {
		t.Method, t.URL = p.method, p.target
		if len(p.keys) == 0 {
			return nil
		}
		var i int
		if p.random {
			mu.Lock()
			i = rng.IntN(len(p.keys))
			mu.Unlock()
		} else {
			i = int((next.Add(1) - 1) % uint64(len(p.keys)))
		}
		t.Header = make(http.Header, 1)
		t.Header.Set(p.header, p.keys[i])
		return nil
	}
}

// attack runs the plan through vegeta over base and returns every hit and
// vegeta's metrics. It stops early, keeping what it has, when ctx ends.
func attack(ctx context.Context, p plan, base http.RoundTripper) ([]hit, *vegeta.Metrics) {
	index := make(map[string]int, len(p.keys))
	for i, k := range p.keys {
		index[k] = i
	}
	client := &http.Client{Transport: tagIdentity{base: base, header: p.header}}
	a := vegeta.NewAttacker(vegeta.Client(client), vegeta.Timeout(p.timeout))
	rate := vegeta.Rate{Freq: p.rate, Per: time.Second}

	stop := context.AfterFunc(ctx, func() { a.Stop() })
	defer stop()

	var (
		hits    []hit
		metrics vegeta.Metrics
	)
	for res := range a.Attack(targeter(p), rate, p.duration, "keyrate-load") {
		metrics.Add(res)
		h := hit{identity: -1, code: int(res.Code), sent: res.Timestamp, latency: res.Latency, err: res.Error}
		if res.Headers != nil {
			if i, ok := index[res.Headers.Get(identityTag)]; ok {
				h.identity = i
			}
			h.policy = res.Headers.Get("RateLimit-Policy")
		}
		if len(p.keys) == 0 && res.Code != 0 {
			h.identity = 0
		}
		hits = append(hits, h)
	}
	metrics.Close()
	return hits, &metrics
}
