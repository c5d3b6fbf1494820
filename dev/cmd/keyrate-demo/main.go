// Command keyrate-demo is a small API behind the keyrate middleware, to try
// rate limiting with curl:
//
//	go run ./dev/cmd/keyrate-demo [-addr 127.0.0.1:8080] [-trusted-proxies 0] [-redis 127.0.0.1:6379]
//	                              [-redis-fallback 0.5] [-max-conns 1024] [-max-conns-per-addr 128]
//	                              [-otel-stdout] [-otlp-endpoint http://127.0.0.1:4318] [-otel-interval 10s]
//
// GET /api/status allows 3 requests per 60 s (10 for an API key starting
// with "pro-"), GET /api/search 20 per 60 s and GET /api/burst 10 per 10 s,
// each its own budget per client. The last is the one to try bursts on: 10
// requests at :09 and 10 more at :11 get 10 through, where a fixed window of
// 10 s would let all 20 in. GET /api/export is under two policies at once,
// "export-burst" 2 per 10 s and "export-hourly" 5 per hour: a request must
// fit both, and a refusal names the one that refused it. POST /api/login
// checks a password (a form or JSON; the demo's is "keyrate") and counts
// failed attempts only, 5 per 15 minutes: a login answered below 400 is
// given back (httplimit.WithRefund), in process and with -redis alike.
// GET /api/report, a slow endpoint (2 s a report), holds a client to 2
// requests in flight beside 20 per 60 s (httplimit.WithConcurrency): a third,
// while two run, waits up to a second for a slot, then gets 429.
//
// A client is its X-API-Key header when it sends one, else its IP address
// (read from X-Forwarded-For only with -trusted-proxies). Every decision is
// logged in one line, and streamed to the page at / that draws it live
// beside what a fixed window would have done, or one lane per policy (see
// internal/live). Neither shows an API key, only a fingerprint of it.
//
// Each in-process budget tracks at most 100,000 clients; a full one makes
// room for a new client by evicting those decided least recently. An
// address may bring at most 20 new API keys a minute, so that it cannot
// force that at will: past that, a new key gets a 429 of its own.
//
// GET /metrics serves Prometheus metrics (package promlimit): requests by
// route and result, decision latency, backend errors, refusals per policy,
// and the keys each in-process limiter tracks.
//
// The same metrics go out as OpenTelemetry's (package otellimit) when asked
// for: with -otel-stdout, written to the output as one JSON line per
// export; by OTLP over HTTP to -otlp-endpoint, or, without the flag, to
// the endpoint OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) names, as any OpenTelemetry program
// reads them. Every -otel-interval, and once more on shutdown. Neither
// set, none are made.
//
// Budgets live in the process by default. With -redis they live in that
// Redis server (keys under "keyrate-demo:"), so that several demo processes
// using it share them: replicas behind one budget per client. While that
// Redis cannot answer, requests are served unlimited (the middleware fails
// open), each logged as an error; with -redis-fallback SHARE each process
// decides them itself instead, at SHARE of each limit (1/N for N
// replicas), logged and counted as the fallback's (see redislimit's
// WithLocalFallback).
//
// The server holds at most -max-conns connections at once (past it, a new
// one takes the place of the least recently used of an address holding two
// more than the newcomer's, else of the one idle the longest, whoever holds
// it) and at most -max-conns-per-addr from one client address (more are
// closed at once), so that no addresses can take every connection or the
// process's file descriptors; and at most 32 of the page's event streams
// (past it, a new one takes the place of the oldest of the clients holding
// the most), 4 per client, each for 10 minutes at most.
//
// The first line of output is "keyrate-demo listening on http://ADDR", with
// the real address, so -addr 127.0.0.1:0 picks a free port that scripts can
// read back.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keyrate/keyrate/dev/cmd/keyrate-demo/internal/live"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free one)")
	hops := flag.Int("trusted-proxies", 0, "number of reverse proxies in front that append to X-Forwarded-For (0: ignore the header)")
	redisAddr := flag.String("redis", "", "keep the budgets in the Redis server at this host:port or redis://[:PASSWORD@]host:port[/db] URL (rediss:// for TLS), shared by every demo process using it (default: in this process)")
	fallback := flag.Float64("redis-fallback", 0, "with -redis: while Redis cannot answer, decide in this process at this share of each limit, in (0, 1]: 1/N for N replicas (default 0: serve unlimited, failing open)")
	maxConns := flag.Int("max-conns", defaultConnLimits.Total, "connections open at once; past it, a new one takes the place of the least recently used of an address holding two more, else of the one idle the longest")
	maxPerAddr := flag.Int("max-conns-per-addr", defaultConnLimits.PerAddr, "connections open at once from one client address (an IPv6 /64); more are closed at once. Behind a reverse proxy, set it to -max-conns")
	otelStdout := flag.Bool("otel-stdout", false, "write the OpenTelemetry metrics to standard output, one JSON line per export")
	otlpEndpoint := flag.String("otlp-endpoint", "", "export the OpenTelemetry metrics by OTLP over HTTP to this base URL (its /v1/metrics), as OTEL_EXPORTER_OTLP_ENDPOINT does (default: that variable's, or no OTLP when it is not set)")
	otelInterval := flag.Duration("otel-interval", defaultExportInterval, "time between OpenTelemetry exports")
	flag.Parse()
	if err := checkFlags(flag.Args(), *hops, *maxConns, *maxPerAddr, *otelInterval, *fallback, *redisAddr); err != nil {
		fmt.Fprintln(os.Stderr, "keyrate-demo:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{TrustedProxies: *hops, Conns: connLimits{Total: *maxConns, PerAddr: *maxPerAddr},
		Telemetry: telemetry{Stdout: *otelStdout, OTLPEndpoint: *otlpEndpoint, Interval: *otelInterval, Getenv: os.Getenv}}
	if *redisAddr != "" {
		c, err := dialRedisQuietly(ctx, *redisAddr)
		if err != nil {
			fatal(err)
		}
		defer c.Close()
		cfg.Redis, cfg.RedisAddr, cfg.RedisFallback = c, shownRedis(*redisAddr), *fallback
	}
	if err := run(ctx, *addr, cfg, os.Stdout); err != nil {
		fatal(err)
	}
}

// fatal ends the demo with err as its one line of standard error, in the
// flag errors' style (no timestamp), and exit status 1.
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "keyrate-demo:", err)
	os.Exit(1)
}

// checkFlags checks what flag.Parse cannot: that no argument is left over
// (every setting is a flag) and that each number is in its range. Its
// error names the flag; the demo exits 2 with it, as flag does.
func checkFlags(args []string, hops, maxConns, maxPerAddr int, otelInterval time.Duration, fallback float64, redisAddr string) error {
	switch {
	case len(args) > 0:
		return fmt.Errorf("unexpected argument %q: the demo takes flags only (-h lists them)", args[0])
	case hops < 0:
		return fmt.Errorf("-trusted-proxies is %d, want 0 or more (0: ignore X-Forwarded-For)", hops)
	case otelInterval <= 0:
		return errors.New("-otel-interval must be positive")
	case maxConns < 1 || maxPerAddr < 1:
		return errors.New("-max-conns and -max-conns-per-addr must be at least 1")
	}
	return checkFallback(fallback, redisAddr)
}

// run serves until ctx ends, writing the address, the curl hints and one
// line per decision to out, and the OpenTelemetry metrics where
// cfg.Telemetry says; their last export is made once the server has
// stopped (a collector that is not there then costs a line, not the exit
// status).
func run(ctx context.Context, addr string, cfg config, out io.Writer) error {
	out = &lockedWriter{w: out}
	hub, err := newLive(cfg)
	if err != nil {
		return err
	}
	otel, shutdownOTel, err := cfg.Telemetry.start(ctx, out)
	if err != nil {
		return err
	}
	defer func() {
		// A context of its own: ctx has ended by now.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownOTel(sctx); err != nil {
			fmt.Fprintf(out, "keyrate-demo: the last OpenTelemetry export failed: %v\n", err)
		}
	}()
	cfg.otel = otel
	subscribers := []func(decision){decisionLogger(out), recordTo(hub)}
	if next := cfg.OnDecision; next != nil {
		subscribers = append(subscribers, next)
	}
	cfg.OnDecision = func(d decision) {
		for _, s := range subscribers {
			s(d)
		}
	}
	h, closeLimiters, err := newServer(cfg)
	if err != nil {
		return err
	}
	defer closeLimiters()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	limited := limitConns(ln, cfg.Conns.orDefault())
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "keyrate-demo listening on %s\n%s", base, hints(base, cfg))

	srv := newHTTPServer(withLive(h, hub), hub, cfg.Timeouts)
	srv.ConnState = limited.connState
	if cfg.onConnState != nil {
		srv.ConnState = func(c net.Conn, s http.ConnState) {
			limited.connState(c, s)
			cfg.onConnState(c, s)
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(limited) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(out, "keyrate-demo shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// timeouts bound how long a client can hold a connection of the server.
type timeouts struct {
	ReadHeader time.Duration // to send a request's headers
	Read       time.Duration // to send a whole request, body included
	Write      time.Duration // to take a response; the page's event stream sets its own deadline per write instead
	Idle       time.Duration // to send the next request on a keep-alive connection
}

// defaultTimeouts are ample for curl, a browser and keyrate-load on any
// network, and short enough that idle or stalled connections cannot pile
// up: each holds a goroutine and buffers, and 3,000 idle keep-alive
// connections took the demo from 13 to 80 MB when none was set.
var defaultTimeouts = timeouts{
	ReadHeader: 5 * time.Second,
	Read:       10 * time.Second,
	Write:      15 * time.Second,
	Idle:       60 * time.Second,
}

// newHTTPServer returns the demo's server for h, with t's timeouts (zero
// fields get defaultTimeouts'). Shutting it down ends the page's event
// streams first, or Shutdown would wait on them.
func newHTTPServer(h http.Handler, hub *live.Hub, t timeouts) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: or(t.ReadHeader, defaultTimeouts.ReadHeader),
		ReadTimeout:       or(t.Read, defaultTimeouts.Read),
		WriteTimeout:      or(t.Write, defaultTimeouts.Write),
		IdleTimeout:       or(t.Idle, defaultTimeouts.Idle),
	}
	srv.RegisterOnShutdown(hub.Close)
	return srv
}

func hints(base string, cfg config) string {
	var b strings.Builder
	if cfg.Redis != nil {
		fmt.Fprintf(&b, "\nBudgets live in Redis at %s, under %q: every demo process using it shares them.\n", cfg.RedisAddr, redisPrefix)
		if cfg.RedisFallback > 0 {
			fmt.Fprintf(&b, "While Redis cannot answer, this process decides at %g of each limit.\n", cfg.RedisFallback)
		}
	} else {
		b.WriteString("\nBudgets live in this process (-redis host:port shares them between processes).\n")
	}
	b.WriteString(cfg.Telemetry.describe())
	fmt.Fprintf(&b, "\nWatch the decisions live: open %s/ in a browser.\n", base)
	fmt.Fprintf(&b, "\nTry it (budgets are per client and per route; a client is its %s, else its IP):\n", keyHeader)
	for _, rt := range routes {
		fmt.Fprintf(&b, "  %-6s %-12s %s", rt.Method, rt.Path, describe(rt.Policies, rt.Unit))
		if rt.Pro != nil {
			fmt.Fprintf(&b, "; %s for a key starting with pro-", describe(rt.Pro, rt.Unit))
		}
		if rt.FailuresOnly {
			b.WriteString(", failed attempts only")
		}
		if rt.Cost != nil {
			b.WriteString(settleHint())
		}
		if rt.Requests != nil {
			fmt.Fprintf(&b, "; and %s, decided with the tokens", describe(rt.Requests, ""))
		}
		if rt.InFlight > 0 {
			fmt.Fprintf(&b, "; %d in flight", rt.InFlight)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, `
  curl -i %[1]s/api/status
  for i in 1 2 3 4; do curl -s -o /dev/null -w '%%{http_code} ' %[1]s/api/status; done; echo
  curl -i -H '%[2]s: alice' %[1]s/api/status
  curl -i -H '%[2]s: pro-alice' %[1]s/api/status   # the pro tier: 10 per 60s
  for i in 1 2 3; do curl -s -o /dev/null -w '%%{http_code} ' %[1]s/api/export; done; echo   # 200 200 429: export-burst refused
  curl -i '%[1]s/api/search?q=limits'
  for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code} ' %[1]s/api/burst; done; echo   # 10 x 200, then 429
  curl -i -d password=guess %[1]s/api/login     # 401: a failed attempt; the 6th within 15 min gets 429
  curl -i -d password=%[4]s %[1]s/api/login   # 200: given back, so it never counts
  curl -i -d max_tokens=2000 -d used=500 %[1]s/api/generate   # reserves 2000 tokens, keeps 500: RateLimit r=9500
  for i in 1 2 3; do curl -s -o /dev/null -w '%%{http_code} ' %[1]s/api/report & done; wait; echo   # 429 200 200: 2 in flight, the third waited 1 s
  curl -s %[1]s%[3]s | grep '^keyrate_requests_total'   # Prometheus metrics
`, base, keyHeader, metricsPath, demoPassword)
	if hops := cfg.TrustedProxies; hops > 0 {
		fmt.Fprintf(&b, "  curl -i -H 'X-Forwarded-For: 203.0.113.7' %s/api/status   # trusting %d proxy hop(s)\n", base, hops)
	}
	b.WriteString("\n")
	return b.String()
}

// decisionLogger returns a subscriber that writes one line per decision.
func decisionLogger(out io.Writer) func(decision) {
	var mu sync.Mutex
	return func(d decision) {
		var line string
		switch {
		case d.Err != nil:
			line = fmt.Sprintf("error    %v", d.Err)
		case d.Refund != nil && d.Settle:
			line = fmt.Sprintf("settled  remaining=%d (gave back %d of %d: it cost %d)", d.Decision.Remaining, d.Given, d.Refund.N(), d.Refund.N()-d.Given)
		case d.Refund != nil:
			line = fmt.Sprintf("refunded remaining=%d (answered below 400: it does not count)", d.Decision.Remaining)
		case d.Decision.Allowed:
			line = fmt.Sprintf("allowed  remaining=%d", d.Decision.Remaining)
		case d.Decision.Overflow:
			line = fmt.Sprintf("refused  too many keys tracked, retry-after=%v", d.Decision.RetryAfter.Round(time.Millisecond))
		case d.Decision.RetryAfter <= 0:
			// A weight over the limit, or one that cannot be read: 413.
			line = fmt.Sprintf("refused  remaining=%d, a cost that can never fit", d.Decision.Remaining)
		default:
			line = fmt.Sprintf("refused  remaining=%d retry-after=%v", d.Decision.Remaining, d.Decision.RetryAfter.Round(time.Millisecond))
		}
		if d.Decision.Fallback {
			// Redis could not answer: decided here, at a share of the limit.
			line += " fallback"
		}
		if p := d.Decision.Policy; p != "" {
			// A route under several policies: the binding one, which
			// refused, or has the least left.
			line += " policy=" + p
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s %-7s %-22q %s\n", d.At.UTC().Format("15:04:05.000"), d.Route, d.Key, line)
	}
}
