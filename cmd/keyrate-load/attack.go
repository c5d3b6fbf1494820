package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// plan is one load run, as the flags describe it.
type plan struct {
	targets  []string // URLs, requests spread over them
	method   string
	rate     int // requests per second
	duration time.Duration
	timeout  time.Duration
	header   string   // carries the identity
	keys     []string // identities; none means requests carry no header
	random   bool     // pick identities and URLs at random instead of in turn
	seed     uint64
	window   time.Duration // 0: take it from RateLimit-Policy, if any
	limit    int           // 0: take it from RateLimit-Policy, if any
}

func (p plan) validate() error {
	if len(p.targets) == 0 {
		return errors.New("-url is required, for example -url http://127.0.0.1:8080/api/status")
	}
	for _, target := range p.targets {
		u, err := url.Parse(target)
		switch {
		case err != nil:
			return fmt.Errorf("-url: %w", err)
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			return fmt.Errorf("-url %q: want an absolute http or https URL", target)
		}
	}
	switch {
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
	identity int // index into plan.keys (0 without keys); -1 when unknown
	target   string
	code     int // 0 when no reply
	sent     time.Time
	latency  time.Duration
	policy   string // the reply's RateLimit-Policy field
	err      string
}

func (h hit) span() Span { return Span{h.sent, h.sent.Add(h.latency)} }

// outcome is what an attack produced.
type outcome struct {
	hits    []hit
	metrics *vegeta.Metrics
	// elapsed is how long requests were sent for: the planned duration, or
	// until the run was interrupted.
	elapsed     time.Duration
	interrupted bool
}

// seqHeader is the header vegeta numbers each request with, as in its
// Result.Seq.
const seqHeader = "X-Vegeta-Seq"

// identities remembers which identity each request carried, by vegeta's
// sequence number, since a Result keeps neither the request's headers nor,
// for a request without a reply, any header at all.
type identities struct {
	base   http.RoundTripper
	header string
	index  map[string]int
	mu     sync.Mutex
	bySeq  map[uint64]int
}

func (t *identities) RoundTrip(r *http.Request) (*http.Response, error) {
	if seq, err := strconv.ParseUint(r.Header.Get(seqHeader), 10, 64); err == nil {
		i := 0
		if len(t.index) > 0 {
			var ok bool
			if i, ok = t.index[r.Header.Get(t.header)]; !ok {
				i = -1
			}
		}
		t.mu.Lock()
		t.bySeq[seq] = i
		t.mu.Unlock()
	}
	return t.base.RoundTrip(r)
}

func (t *identities) of(seq uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.bySeq[seq]; ok {
		delete(t.bySeq, seq)
		return i
	}
	return -1
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

// errStopped is what the targeter answers once the run is stopped: vegeta
// may still ask for a few more requests after Stop, and none is sent.
var errStopped = errors.New("keyrate-load: stopped")

// targeter hands out requests with identities in turn, or at random from a
// seeded source so that a run can be repeated, and spreads them over the
// URLs the same way: in turn, each identity visits every URL in turn
// whatever the number of identities and URLs. Once stopped is set it hands
// out none. Vegeta calls it from many workers at once.
func targeter(p plan, stopped *atomic.Bool) vegeta.Targeter {
	var mu sync.Mutex
	var next uint64
	rng := rand.New(rand.NewPCG(p.seed, p.seed^0x9e3779b97f4a7c15))
	keys, urls := uint64(max(len(p.keys), 1)), uint64(len(p.targets))
	return func(t *vegeta.Target) error {
		if stopped.Load() {
			return errStopped
		}
		mu.Lock()
		var id, u uint64
		if p.random {
			id, u = rng.Uint64N(keys), rng.Uint64N(urls)
		} else {
			id, u = next%keys, next/keys%urls
			next++
		}
		mu.Unlock()
		t.Method, t.URL = p.method, p.targets[u]
		if len(p.keys) > 0 {
			t.Header = make(http.Header, 1)
			t.Header.Set(p.header, p.keys[id])
		}
		return nil
	}
}

// attack runs the plan through vegeta over base and returns every hit and
// vegeta's metrics. Each second it writes a line to progress with the
// replies of that second. When ctx ends it stops sending, waits for the
// requests in flight, and reports the run as interrupted.
//
// The loop is vegeta's attacker. What keyrate-load adds to it (the
// targeter, each request's identity, the hits it keeps, the progress)
// costs about 1.1 µs and 7 allocations a request over vegeta's own 5.8 µs
// and 40, every request answered at once (BenchmarkAttackLoop, six runs on
// 2 cores): vegeta's static targeter cannot spread identities over the
// URLs or draw them from a seed, and its Result keeps no request header to
// tell a hit's identity by.
func attack(ctx context.Context, p plan, base http.RoundTripper, progress *progress) outcome {
	index := make(map[string]int, len(p.keys))
	for i, k := range p.keys {
		index[k] = i
	}
	ids := &identities{base: base, header: p.header, index: index, bySeq: map[uint64]int{}}
	client := &http.Client{Transport: ids}
	a := vegeta.NewAttacker(vegeta.Client(client), vegeta.Timeout(p.timeout))
	rate := vegeta.Rate{Freq: p.rate, Per: time.Second}

	start := time.Now()
	o := outcome{elapsed: p.duration}
	var metrics vegeta.Metrics
	var stopped atomic.Bool
	results := a.Attack(targeter(p, &stopped), rate, p.duration, "keyrate-load")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	done := ctx.Done()
	progress.begin()
	for results != nil {
		select {
		case res, ok := <-results:
			if !ok {
				results = nil
				break
			}
			if res.Error == errStopped.Error() {
				break
			}
			metrics.Add(res)
			h := hit{identity: ids.of(res.Seq), target: res.URL, code: int(res.Code), sent: res.Timestamp, latency: res.Latency, err: res.Error}
			if res.Headers != nil {
				h.policy = res.Headers.Get("RateLimit-Policy")
			}
			o.hits = append(o.hits, h)
			progress.add(h.code)
		case <-tick.C:
			progress.line(time.Since(start))
		case <-done:
			done = nil
			stopped.Store(true)
			a.Stop()
			o.interrupted = true
			o.elapsed = min(time.Since(start), p.duration)
			progress.interrupted(o.elapsed)
		}
	}
	progress.end()
	metrics.Close()
	o.metrics = &metrics
	return o
}
