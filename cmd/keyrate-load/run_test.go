package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pipeListener connects clients to an http.Server through net.Pipe, so a
// whole load run happens inside a synctest bubble: time is fake, every
// request's round trip takes no time, and the run is the same every time.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serve runs h behind a pipe listener for the rest of the bubble's test and
// returns the transport that reaches it.
func serve(t *testing.T, h http.Handler) http.RoundTripper {
	l := newPipeListener()
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	tr := &http.Transport{DialContext: l.dial, MaxIdleConnsPerHost: 100}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return tr
}

// slidingLog admits at most limit requests per X-API-Key within any window,
// exactly: it keeps the instants it admitted and refuses a request while
// limit of them lie in (now-window, now], as keyrate does. Like keyrate's
// middleware it announces its policy in RateLimit-Policy, so runs can read
// the limit from it. The module stays free of the core, whose release it
// would otherwise have to follow.
func slidingLog(limit int, window time.Duration) http.Handler {
	var mu sync.Mutex
	admitted := map[string][]time.Time{}
	policy := fmt.Sprintf(`"search";q=%d;w=%d`, limit, window/time.Second)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", policy)
		key, now := r.Header.Get("X-API-Key"), time.Now()
		mu.Lock()
		log := admitted[key]
		for len(log) > 0 && !log[0].After(now.Add(-window)) {
			log = log[1:]
		}
		ok := len(log) < limit
		if ok {
			log = append(log, now)
		}
		admitted[key] = log
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
}

func runLoad(t *testing.T, transport http.RoundTripper, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := run(t.Context(), args, &out, &errs, transport)
	if errs.Len() > 0 {
		t.Logf("stderr: %s", errs.String())
	}
	return code, out.String()
}

func TestRunHoldsExactlyTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, slidingLog(5, 10*time.Second))
		code, out := runLoad(t, tr, "-url", "http://127.0.0.1/api/search", "-rate", "200", "-duration", "30s", "-key-count", "5")
		t.Log("\n" + out)
		if code != exitOK {
			t.Errorf("exit status %d, want %d", code, exitOK)
		}
		for _, want := range []string{
			"keyrate-load: GET http://127.0.0.1/api/search at 200 requests/s for 30s, 5 identities in X-API-Key, in turn",
			"limit 5 per 10 s (from the server's RateLimit-Policy)",
			"all 5 identities: held exactly 5 per 10 s under 200 requests/s",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		// Vegeta paces hits at 5 ms, 10 ms, ... 30 s: 6001 of them, in turn
		// over the identities. Each identity gets 5 admitted in each 10 s,
		// and load-1 a 16th at 30 s, when its first of 20 s has left the
		// window.
		for i, want := range []string{
			"load-1    1201  16        1185      0      5                 held exactly 5 per 10 s under 40 requests/s",
			"load-2    1200  15        1185      0      5                 held exactly 5 per 10 s under 40 requests/s",
			"load-5    1200  15        1185      0      5                 held exactly 5 per 10 s under 40 requests/s",
			"     0   200        25       175      0",
			"     9   200         0       200      0",
			"    10   200        25       175      0",
			"    30     1         1         0      0",
			"total  6001        76      5925      0",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("line %d: output lacks %q", i, want)
			}
		}
	})
}

// fixedWindow admits limit requests per key per calendar window: the design
// that lets a burst through on both sides of a boundary.
func fixedWindow(limit int, window time.Duration) http.Handler {
	var mu sync.Mutex
	counts := map[string]int{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := fmt.Sprint(r.Header.Get("X-API-Key"), time.Now().UnixNano()/int64(window))
		mu.Lock()
		counts[k]++
		n := counts[k]
		mu.Unlock()
		if n > limit {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
}

func TestRunFlagsAnExcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, fixedWindow(5, 10*time.Second))
		time.Sleep(9 * time.Second) // start one second before a boundary
		code, out := runLoad(t, tr, "-url", "http://127.0.0.1/x", "-rate", "100", "-duration", "3s",
			"-keys", "alice,bob", "-window", "10s", "-limit", "5")
		t.Log("\n" + out)
		if code != exitExcess {
			t.Errorf("exit status %d, want %d", code, exitExcess)
		}
		for _, want := range []string{
			"limit 5 per 10 s (from the flags)",
			"alice     151   10        141       0      10                EXCESS: 10 admitted within 10 s, 5 over the limit of 5",
			"2 of 2 identities: EXCESS: 10 admitted within 10 s, 5 over the limit of 5",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})
}

func TestRunCountsOtherOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-API-Key") == "broken" {
				http.Error(w, "down", http.StatusServiceUnavailable)
			}
		}))
		code, out := runLoad(t, tr, "-url", "http://127.0.0.1/x", "-rate", "10", "-duration", "2s", "-keys", "fine,broken")
		t.Log("\n" + out)
		if code != exitOK {
			t.Errorf("exit status %d, want %d", code, exitOK)
		}
		for _, want := range []string{
			"no window to check: pass -window and -limit",
			"fine      11    11        0         0",
			"broken    10    0         0         10",
			"status codes 200: 11, 503: 10",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})
}

func TestRunWithoutReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refuse := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, net.ErrClosed })
		code, out := runLoad(t, refuse, "-url", "http://127.0.0.1/x", "-rate", "5", "-duration", "1s")
		if code != exitFailed {
			t.Errorf("exit status %d, want %d\n%s", code, exitFailed, out)
		}
		// Vegeta sends at 200 ms, 400 ms, ... 1.2 s.
		for _, want := range []string{
			"identity                            sent  admitted  rejected  other  no reply",
			"(no X-API-Key: the client address)  6     0         0         6      6",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}

// TestIdentityWithoutAnyReply: an identity whose every request failed is
// reported as such, not as sent 0 or as held.
func TestIdentityWithoutAnyReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, slidingLog(5, 10*time.Second))
		partial := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get("X-API-Key") == "down" {
				return nil, errors.New("dial tcp 127.0.0.1:80: connect: connection refused")
			}
			return tr.RoundTrip(r)
		})
		code, out := runLoad(t, partial, "-url", "http://127.0.0.1/x", "-rate", "10", "-duration", "2s", "-keys", "up,down")
		t.Log("\n" + out)
		if code != exitOK {
			t.Errorf("exit status %d, want %d", code, exitOK)
		}
		// 21 requests, 100 ms apart, in turn: up gets 11, down 10.
		for _, want := range []string{
			"up        11    5         6         0      0         5                 held exactly 5 per 10 s under 5.5 requests/s",
			"down      10    0         0         10     10        0                 no reply to any of its 10 requests: not checked",
			"1 of 2 identities: held exactly 5 per 10 s under 10.5 requests/s; 1 not checked (no 2xx or 429 reply)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})
}

// TestProgressLineEachSecond: while a run goes, a line each second on
// standard error with the replies of that second.
func TestProgressLineEachSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, slidingLog(2, 10*time.Second))
		var out, errs bytes.Buffer
		// At 3 requests/s vegeta sends at 333 ms, 667 ms, 1 s less 1 ns, ...,
		// 3.33 s: never on a whole second, so each line's count is exact.
		code := run(t.Context(), []string{"-url", "http://127.0.0.1/x", "-rate", "3", "-duration", "3s", "-keys", "a"}, &out, &errs, tr)
		if code != exitOK {
			t.Errorf("exit status %d, want %d", code, exitOK)
		}
		want := "keyrate-load: replies each second (Ctrl-C stops the run and reports what it got)\n" +
			"    at  replies  admitted  rejected  other   so far\n" +
			"    1s        3         2         1      0        3\n" +
			"    2s        3         0         3      0        6\n" +
			"    3s        3         0         3      0        9\n" +
			"   end        1         0         1      0       10\n"
		if errs.String() != want {
			t.Errorf("standard error\n%s\nwant\n%s", errs.String(), want)
		}
	})
}

// TestInterruptReportsTheRealRun: Ctrl-C after 3 s of a 30 s run at 50/s
// reports 3 s, 150 requests and the rates they were really sent at, marks
// the report interrupted and exits with its own status.
func TestInterruptReportsTheRealRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, slidingLog(20, time.Minute))
		ctx, interrupt := context.WithCancel(t.Context())
		var out, errs bytes.Buffer
		code := make(chan int)
		go func() {
			code <- run(ctx, []string{"-url", "http://127.0.0.1/api/search", "-rate", "50", "-duration", "30s", "-key-count", "5"}, &out, &errs, tr)
		}()
		// Requests go at 20 ms, 40 ms, ... 3 s; the next would be 3.02 s.
		time.Sleep(3*time.Second + time.Millisecond)
		interrupt()
		if got := <-code; got != exitInterrupted {
			t.Errorf("exit status %d, want %d", got, exitInterrupted)
		}
		t.Log("\n" + out.String())
		for _, want := range []string{
			"INTERRUPTED after 3s of 30s: 150 requests sent, 50 requests/s\n",
			"load-1    30    20        10        0      20                held exactly 20 per 60 s under 10 requests/s\n",
			"all 5 identities: held exactly 20 per 60 s under 50 requests/s, interrupted after 3s of 30s\n",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if !strings.Contains(errs.String(), "keyrate-load: interrupted after 3s;") {
			t.Errorf("standard error does not say the run was interrupted:\n%s", errs.String())
		}
	})
}

// replicas serves each handler at its own host, a.test, b.test, ...: the
// same service behind several URLs.
func replicas(t *testing.T, handlers ...http.Handler) http.RoundTripper {
	byHost := map[string]http.RoundTripper{}
	for i, h := range handlers {
		byHost[string(rune('a'+i))+".test"] = serve(t, h)
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return byHost[r.URL.Host].RoundTrip(r)
	})
}

// TestSeveralURLs spreads the load over two replicas: sharing one limit
// (as demo replicas sharing one Redis do) each identity is held exactly
// across both; each with its own limit, each identity gets twice its limit
// and the run reports the excess.
func TestSeveralURLs(t *testing.T) {
	args := []string{"-url", "http://a.test/x", "-url", "http://b.test/x", "-rate", "40", "-duration", "5s", "-key-count", "2"}
	synctest.Test(t, func(t *testing.T) {
		shared := slidingLog(10, time.Minute)
		code, out := runLoad(t, replicas(t, shared, shared), args...)
		t.Log("\n" + out)
		if code != exitOK {
			t.Errorf("shared limit: exit status %d, want %d", code, exitOK)
		}
		// 201 requests: load-1 gets 101, load-2 100; each identity's
		// requests alternate between the URLs, and its first 10 are
		// admitted, 5 on each.
		for _, want := range []string{
			"keyrate-load: GET 2 URLs at 40 requests/s for 5s, 2 identities in X-API-Key, in turn\n  http://a.test/x\n  http://b.test/x\n",
			"url              sent  admitted  rejected  other\nhttp://a.test/x  101   10        91        0\nhttp://b.test/x  100   10        90        0\n",
			"load-1    101   10        91        0      10                held exactly 10 per 60 s",
			"load-2    100   10        90        0      10                held exactly 10 per 60 s",
			"all 2 identities: held exactly 10 per 60 s under 40.2 requests/s",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("shared limit: output lacks %q", want)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		code, out := runLoad(t, replicas(t, slidingLog(10, time.Minute), slidingLog(10, time.Minute)), args...)
		t.Log("\n" + out)
		if code != exitExcess {
			t.Errorf("a limit each: exit status %d, want %d", code, exitExcess)
		}
		if want := "2 of 2 identities: EXCESS: 20 admitted within 60 s, 10 over the limit of 10"; !strings.Contains(out, want) {
			t.Errorf("a limit each: output lacks %q", want)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRandomPickIsSeeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		args := []string{"-url", "http://127.0.0.1/x", "-rate", "50", "-duration", "2s", "-keys", "a,b,c", "-pick", "random", "-seed", "7"}
		_, first := runLoad(t, tr, args...)
		_, second := runLoad(t, tr, args...)
		table := func(out string) string {
			_, after, _ := strings.Cut(out, "identity")
			return after
		}
		if table(first) != table(second) {
			t.Errorf("same seed, different picks:\n%s\n%s", first, second)
		}
		if !strings.Contains(first, "at random, seed 7") {
			t.Errorf("output does not say the pick is random:\n%s", first)
		}
		// 101 hits over 3 identities: each gets a share near 34, and the
		// shares are not the round-robin split of 34, 34, 33.
		var shares []int
		for _, k := range []string{"a", "b", "c"} {
			var n int
			for _, line := range strings.Split(table(first), "\n") {
				if f := strings.Fields(line); len(f) > 1 && f[0] == k {
					fmt.Sscan(f[1], &n)
				}
			}
			if n < 15 || n > 55 {
				t.Errorf("identity %s got %d of 101 requests", k, n)
			}
			shares = append(shares, n)
		}
		if fmt.Sprint(shares) == "[34 34 33]" {
			t.Errorf("random pick gave the round-robin split %v", shares)
		}
	})
}

func TestFlagErrors(t *testing.T) {
	cases := map[string][]string{
		"no url":               {},
		"relative url":         {"-url", "/api/status"},
		"ftp url":              {"-url", "ftp://127.0.0.1/x"},
		"zero rate":            {"-url", "http://127.0.0.1/", "-rate", "0"},
		"zero duration":        {"-url", "http://127.0.0.1/", "-duration", "0s"},
		"negative window":      {"-url", "http://127.0.0.1/", "-window", "-1s"},
		"negative limit":       {"-url", "http://127.0.0.1/", "-limit", "-1"},
		"both key flags":       {"-url", "http://127.0.0.1/", "-keys", "a", "-key-count", "2"},
		"negative key count":   {"-url", "http://127.0.0.1/", "-key-count", "-2"},
		"empty key":            {"-url", "http://127.0.0.1/", "-keys", "a,,b"},
		"unknown pick":         {"-url", "http://127.0.0.1/", "-pick", "fair"},
		"stray argument":       {"-url", "http://127.0.0.1/", "extra"},
		"bad second url":       {"-url", "http://127.0.0.1/", "-url", "127.0.0.1:8081"},
		"unknown flag":         {"-url", "http://127.0.0.1/", "-bogus"},
		"empty header w/ keys": {"-url", "http://127.0.0.1/", "-keys", "a", "-header", ""},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errs bytes.Buffer
			code := run(t.Context(), args, &out, &errs, nil)
			if code != exitUsage || errs.Len() == 0 || out.Len() != 0 {
				t.Errorf("run(%q) = %d, stderr %q, stdout %q; want status %d with a message", args, code, errs.String(), out.String(), exitUsage)
			}
		})
	}
}
