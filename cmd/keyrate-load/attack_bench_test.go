package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// answerAll is a transport that answers every request at once, 200 with a
// RateLimit-Policy field, so that a benchmark measures the load loop, not
// a server or the network.
type answerAll struct{}

func (answerAll) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"api";q=100;w=60`)
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: r}, nil
}

// Each run of BenchmarkAttackLoop asks for loopRequests at loopRate, more
// than either loop keeps up with on a small machine, so that each sends as
// fast as it can and its time per request is its own cost.
const (
	loopRequests = 20_000
	loopRate     = 200_000
)

// BenchmarkAttackLoop measures the load loop's cost per request, every
// request answered at once by answerAll: Vegeta is vegeta's attacker alone
// (a static target, its results gathered into its Metrics), KeyrateLoad is
// keyrate-load's attack over the same attacker and the same rate (ten
// identities in turn, each request's identity, code, timing and
// RateLimit-Policy kept, the progress tally). ns/request is the run's time
// over the requests answered; the difference between the two is what
// keyrate-load adds to vegeta.
func BenchmarkAttackLoop(b *testing.B) {
	const url = "http://127.0.0.1:9/api/search"
	duration := time.Duration(loopRequests) * time.Second / loopRate
	report := func(b *testing.B, elapsed time.Duration, requests int) {
		if requests == 0 {
			b.Fatal("no request was answered")
		}
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(requests), "ns/request")
		b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
	}
	b.Run("Vegeta", func(b *testing.B) {
		var elapsed time.Duration
		requests := 0
		for b.Loop() {
			a := vegeta.NewAttacker(vegeta.Client(&http.Client{Transport: answerAll{}}), vegeta.Timeout(time.Second))
			tr := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: url})
			var m vegeta.Metrics
			start := time.Now()
			for res := range a.Attack(tr, vegeta.Rate{Freq: loopRate, Per: time.Second}, duration, "bench") {
				m.Add(res)
			}
			elapsed += time.Since(start)
			m.Close()
			requests += int(m.Requests)
		}
		report(b, elapsed, requests)
	})
	b.Run("KeyrateLoad", func(b *testing.B) {
		keys := make([]string, 10)
		for i := range keys {
			keys[i] = "client-" + strconv.Itoa(i)
		}
		p := plan{targets: []string{url}, method: http.MethodGet, rate: loopRate, duration: duration,
			timeout: time.Second, header: "X-API-Key", keys: keys}
		if err := p.validate(); err != nil {
			b.Fatal(err)
		}
		var elapsed time.Duration
		requests := 0
		for b.Loop() {
			start := time.Now()
			o := attack(context.Background(), p, answerAll{}, &progress{w: io.Discard})
			elapsed += time.Since(start)
			requests += len(o.hits)
			for _, h := range o.hits {
				if h.identity < 0 || h.code != http.StatusOK || h.policy == "" {
					b.Fatalf("a hit lost its identity, code or policy: %+v", h)
				}
			}
		}
		report(b, elapsed, requests)
	})
}
