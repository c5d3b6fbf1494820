package upstream_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// t0 is the instant the tests' clocks start at.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// bubbleClock is the clock of a testing/synctest bubble, given to the
// backend and the Transport alike (WithClock): its time moves only once
// every goroutine of the bubble waits, to the earliest instant one waits
// for, so that no caller reads it mid-step. It reads t0 when made (a
// bubble's own epoch, 2000, is before the Unix times that upstreams send
// can be told from seconds), and counts the waits begun on it.
type bubbleClock struct {
	epoch time.Time // the bubble's time when the clock was made
	waits atomic.Int64
}

func newBubbleClock() *bubbleClock { return &bubbleClock{epoch: time.Now()} }

func (c *bubbleClock) Now() time.Time { return t0.Add(time.Since(c.epoch)) }

func (c *bubbleClock) After(d time.Duration) <-chan time.Time {
	c.waits.Add(1)
	return time.After(d)
}

// run runs callers, each on its own goroutine, until all have returned;
// the bubble's clock moves whenever every one still running waits on it.
func run(callers ...func()) {
	done := make(chan struct{})
	for _, f := range callers {
		go func() {
			defer func() { done <- struct{}{} }()
			f()
		}()
	}
	for range callers {
		<-done
	}
}

// memoryNet holds the upstreams of the tests by host, so that a Transport's
// requests reach their handlers in process: a bubble's clock cannot move
// while a goroutine waits on a socket.
var memoryNet struct {
	sync.Map // host -> http.Handler
	hosts    atomic.Int64
}

// listen serves h at a host of its own and returns its URL.
func listen(t *testing.T, h http.Handler) string {
	host := "upstream-" + strconv.FormatInt(memoryNet.hosts.Add(1), 10) + ".test"
	memoryNet.Store(host, h)
	t.Cleanup(func() { memoryNet.Delete(host) })
	return "http://" + host
}

// inMemory is the base RoundTripper of the tests' Transports: it serves a
// request with its host's handler, and closes its body, as a
// RoundTripper must.
type inMemory struct{}

func (inMemory) RoundTrip(req *http.Request) (*http.Response, error) {
	h, ok := memoryNet.Load(req.URL.Host)
	if !ok {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &net404{req.URL.Host}
	}
	served := req.Clone(req.Context()) // a server's request always has a body
	if served.Body == nil {
		served.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	h.(http.Handler).ServeHTTP(rec, served)
	if req.Body != nil {
		req.Body.Close()
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// net404 is the error of a request for a host no test serves.
type net404 struct{ host string }

func (e *net404) Error() string { return "no upstream at " + e.host }
