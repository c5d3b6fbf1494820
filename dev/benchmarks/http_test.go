package benchmarks

import (
	"fmt"
	"math"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// statusWriter is the smallest ResponseWriter that still records a
// response's status. It keeps its header map between requests (serve clears
// it), so the allocations counted are the middleware's own.
type statusWriter struct {
	h    http.Header
	code int
}

func newStatusWriter() *statusWriter { return &statusWriter{h: make(http.Header)} }

func (w *statusWriter) Header() http.Header { return w.h }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// serve runs one request through h and returns the response's status.
func (w *statusWriter) serve(h http.Handler, r *http.Request) int {
	clear(w.h)
	w.code = 0
	h.ServeHTTP(w, r)
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// ok is the trivial handler every middleware wraps.
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// Every middleware admits exactly its budget of requests from one client
// address, whatever the port, refuses the next with 429, even when its
// headers claim another address, and keeps other addresses apart: all four
// are keyed by the same identity and actually limit. It runs in a synctest
// bubble, so the libraries that read time.Now see a clock that does not
// move; go-limiter reads the raw clock, but a 1-minute window cannot pass
// during the test.
func TestHTTPPeersLimitByClientAddress(t *testing.T) {
	for _, p := range HTTPPeers {
		t.Run(p.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				served := 0
				next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					served++
					w.WriteHeader(http.StatusOK)
				})
				h, closeFn, err := p.New(Budget(), next)
				if err != nil {
					t.Fatal(err)
				}
				defer closeFn()
				w := newStatusWriter()
				clients := ClientRequests(0, 2)
				fromPort := func(port int) *http.Request {
					r := clients[0].Clone(clients[0].Context())
					r.RemoteAddr = fmt.Sprintf("%s:%d", ClientAddr(0), port)
					return r
				}
				for i := range BudgetLimit {
					if code := w.serve(h, fromPort(1000+i)); code != http.StatusOK {
						t.Fatalf("request %d of a fresh budget of %d: status %d", i+1, BudgetLimit, code)
					}
				}
				if code := w.serve(h, fromPort(2000)); code != http.StatusTooManyRequests {
					t.Fatalf("request %d: status %d, want 429", BudgetLimit+1, code)
				}
				spoofed := fromPort(2001)
				spoofed.Header.Set("X-Forwarded-For", "203.0.113.9")
				spoofed.Header.Set("X-Real-IP", "203.0.113.9")
				if code := w.serve(h, spoofed); code != http.StatusTooManyRequests {
					t.Fatalf("a request claiming another address in its headers: status %d, want 429", code)
				}
				if code := w.serve(h, clients[1]); code != http.StatusOK {
					t.Fatalf("another client: status %d: clients share a budget", code)
				}
				if served != BudgetLimit+1 {
					t.Fatalf("the handler ran %d times, want %d", served, BudgetLimit+1)
				}
			})
		})
	}
}

func TestClientRequests(t *testing.T) {
	rs := ClientRequests(255, 2)
	if rs[0].RemoteAddr != "198.18.0.255:40000" || rs[1].RemoteAddr != "198.18.1.0:40000" {
		t.Fatalf("addresses %q, %q", rs[0].RemoteAddr, rs[1].RemoteAddr)
	}
	if rs[0].URL.Path != HTTPRoute || rs[0].Method != http.MethodGet {
		t.Fatalf("request %s %s", rs[0].Method, rs[0].URL.Path)
	}
}

// httpClients is how many client addresses the HTTP benchmark has in use
// at a time. A token bucket gives a client over its budget one request back
// every 600 ms, so the deny path's admitted share grows with the number of
// clients; with 256 it stays well under the 1% its check allows.
const httpClients = 256

// BenchmarkHTTP runs the same trivial handler behind each middleware, over
// httpClients client addresses split between the goroutines of RunParallel,
// as a server handles requests. Names are path=P/lib=L (benchstat -col
// /lib). On the deny path every client has spent its budget beforehand; on
// the admit path every client stays within it, moving on to fresh addresses
// as the throughput benchmarks' parallel-10k does. Each benchmark reports
// admit/op and fails if the share admitted contradicts its path or if any
// response is neither 200 nor 429.
func BenchmarkHTTP(b *testing.B) {
	for _, path := range Paths {
		for _, p := range HTTPPeers {
			b.Run("path="+string(path)+"/lib="+p.Name, func(b *testing.B) {
				benchHTTP(b, p, path)
			})
		}
	}
}

func benchHTTP(b *testing.B, p HTTPPeer, path Path) {
	h, closeFn, err := p.New(Budget(), ok)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(closeFn)
	procs := runtime.GOMAXPROCS(0)
	size := httpClients / procs
	parts, passes, spend := procs, math.MaxInt, BudgetLimit
	if path == Admit {
		parts, passes, spend = partsNeeded(b.N, size, procs), PerKey, 1
	}
	reqs := ClientRequests(0, parts*size)
	w := newStatusWriter()
	for _, r := range reqs {
		for range spend {
			if code := w.serve(h, r); code != http.StatusOK {
				b.Fatalf("preparing: status %d", code)
			}
		}
	}
	pool := newPartPool(len(reqs), size)
	var admitted, other atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := pool.cursor(passes)
		w := newStatusWriter()
		var yes, odd int64
		for pb.Next() {
			switch w.serve(h, reqs[c.next()]) {
			case http.StatusOK:
				yes++
			case http.StatusTooManyRequests:
			default:
				odd++
			}
		}
		admitted.Add(yes)
		other.Add(odd)
	})
	b.StopTimer()
	b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
	if n := other.Load(); n > 0 {
		b.Fatalf("%d responses were neither 200 nor 429", n)
	}
	if err := path.Check(int(admitted.Load()), 0, b.N); err != nil {
		b.Fatal(err)
	}
}
