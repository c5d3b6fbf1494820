// Command keyrate-rls is a rate limit service for Envoy (and Istio, Envoy
// Gateway, anything that speaks envoy.service.ratelimit.v3): it answers
// ShouldRateLimit with keyrate's exact sliding windows, reading
// envoyproxy/ratelimit's YAML configuration.
//
//	keyrate-rls -config rules.yaml [-grpc :8081] [-http :8080] [-reload-interval 5s]
//	            [-max-keys 1000000] [-drain-delay 0] [-shutdown-timeout 10s]
//	            [-log-level info] [-log-format text]
//	            [-redis host:port | -redis-cluster host:port,...] [-redis-prefix keyrate-rls:]
//	            [-redis-timeout 250ms] [-redis-deny-cache 10000] [-redis-deny-cache-max-hold 1s]
//	            [-redis-fallback 0] [-redis-resolution 0] [-redis-hash-tag-secret-file FILE]
//
// Every descriptor of a request is decided together, all or nothing: a
// request one descriptor refuses counts against none of the others. A
// descriptor may be under several limits at once, and a limit's window
// may be any duration (window: 3s), besides envoyproxy/ratelimit's units.
// See README.md for the configuration, how to point Envoy at it, and how
// it differs from envoyproxy/ratelimit.
//
// The gRPC address serves envoy.service.ratelimit.v3.RateLimitService and
// grpc.health.v1.Health; the HTTP address serves GET /healthcheck (200
// when ready, 503 once a shutdown begins), POST /json (a RateLimitRequest in
// protojson, answered in protojson, with status 429 when over the limit)
// and GET /metrics (Prometheus).
//
// Budgets live in this process, right for one replica; with -redis (or
// -redis-cluster) they live in Redis, one budget across every replica
// using it, each request still decided all or nothing in one script run
// (on a Cluster, a request's budgets share the slot of its domain). While
// Redis cannot answer, requests fail with UNAVAILABLE at once after the
// first (a circuit breaker), or, with -redis-fallback SHARE, are decided
// in the process at that share of each limit. The first line of
// standard output gives the addresses it listens on ("keyrate-rls serving
// gRPC on ADDR and HTTP on ADDR"), so that port 0 picks free ports a script
// can read back; logs go to standard error. The configuration file is read
// again every -reload-interval and on SIGHUP, and loaded when it changed:
// counts carry over, and an invalid file is logged and changes nothing.
// SIGINT or SIGTERM shut the service down gracefully: it answers 503 to
// health checks for -drain-delay, then waits up to -shutdown-timeout for
// the calls in flight.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
)

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keyrate-rls:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if err := run(ctx, opts, hup, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "keyrate-rls:", err)
		os.Exit(1)
	}
}

// options are the command's settings.
type options struct {
	config          string
	grpcAddr        string
	httpAddr        string
	reloadInterval  time.Duration
	maxKeys         int
	shutdownTimeout time.Duration
	drainDelay      time.Duration
	logLevel        slog.Level
	logJSON         bool
	// redis is where budgets live when set; nil: in this process.
	redis *redisOptions

	// clock decides on a keyrate.ManualClock in tests; nil is the system
	// clock. No flag sets it.
	clock keyrate.Clock
}

// parseFlags reads the command line.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("keyrate-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", "", "the rules: envoyproxy/ratelimit's YAML, with keyrate's extensions (required)")
	fs.StringVar(&o.grpcAddr, "grpc", ":8081", "address of the gRPC server (port 0 picks a free one)")
	fs.StringVar(&o.httpAddr, "http", ":8080", "address of the HTTP server: /healthcheck, /json, /metrics (port 0 picks a free one)")
	fs.DurationVar(&o.reloadInterval, "reload-interval", 5*time.Second, "how often to read the configuration file again (0: only on SIGHUP)")
	fs.IntVar(&o.maxKeys, "max-keys", 1_000_000, "budgets tracked at once; past it, the budgets decided least recently are forgotten to make room (0: no bound)")
	fs.DurationVar(&o.drainDelay, "drain-delay", 0, "how long a shutdown keeps serving, /healthcheck answering 503, before it stops taking calls: time for load balancers to notice")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a shutdown waits for calls in flight")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	redisAddr := fs.String("redis", "", "keep budgets in the Redis server at this host:port, one budget across every keyrate-rls using it (default: in this process)")
	redisCluster := fs.String("redis-cluster", "", "keep budgets in the Redis Cluster with these seed nodes, host:port,host:port,...")
	var r redisOptions
	fs.StringVar(&r.prefix, "redis-prefix", defaultRedisPrefix, "the prefix of every key written to Redis; replicas sharing budgets use the same")
	fs.DurationVar(&r.timeout, "redis-timeout", redislimit.DefaultTimeout, "the time budget of each call to Redis")
	fs.IntVar(&r.denyCache, "redis-deny-cache", 10_000, "keys whose refusal by Redis is held locally, refusing again without a round trip while it must stand (0: none)")
	fs.DurationVar(&r.denyHold, "redis-deny-cache-max-hold", 0, "the longest the deny cache holds a refusal without asking Redis (default 1s)")
	fs.Float64Var(&r.fallback, "redis-fallback", 0, "while Redis cannot answer, decide in this process at this share of each limit, in (0, 1]: 1/N for N replicas (default 0: answer UNAVAILABLE)")
	fs.DurationVar(&r.resolution, "redis-resolution", 0, "record hits in Redis at this resolution, bounding a budget's memory by its window instead of its limit (default 0: exact)")
	fs.StringVar(&r.secretFile, "redis-hash-tag-secret-file", "", "a file holding the secret (16 bytes or more) that keys the hash tags placing budgets in Cluster slots")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var redisSet []string // the -redis-... options given
	fs.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "redis-") && f.Name != "redis-cluster" {
			redisSet = append(redisSet, "-"+f.Name)
		}
	})
	redis, err := parseRedisFlags(*redisAddr, *redisCluster, redisSet, r)
	if err != nil {
		return o, err
	}
	if o.redis = redis; redis != nil {
		redis.fallbackKeys = o.maxKeys
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case o.config == "":
		return o, errors.New("-config is required: the file of rate limit rules")
	case o.reloadInterval < 0:
		return o, fmt.Errorf("-reload-interval is %v, want 0 (off) or more", o.reloadInterval)
	case o.maxKeys < 0:
		return o, fmt.Errorf("-max-keys is %d, want 0 (no bound) or more", o.maxKeys)
	case o.drainDelay < 0:
		return o, fmt.Errorf("-drain-delay is %v, want 0 or more", o.drainDelay)
	case o.shutdownTimeout <= 0:
		return o, fmt.Errorf("-shutdown-timeout is %v, want more than 0", o.shutdownTimeout)
	case *format != "text" && *format != "json":
		return o, fmt.Errorf("-log-format is %q, want text or json", *format)
	}
	if err := o.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return o, fmt.Errorf("-log-level is %q, want debug, info, warn or error", *level)
	}
	o.logJSON = *format == "json"
	return o, nil
}

// run serves until ctx ends, then shuts down gracefully. It writes the
// addresses it serves on to stdout and logs to stderr; hup asks for the
// configuration to be read again.
func run(ctx context.Context, o options, hup <-chan os.Signal, stdout, stderr io.Writer) error {
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	var log *slog.Logger
	if o.logJSON {
		log = slog.New(slog.NewJSONHandler(stderr, hopts))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, hopts))
	}

	data, err := os.ReadFile(o.config)
	if err != nil {
		return err
	}
	rs, err := parseConfig(o.config, data)
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := newMetrics(reg)
	if err != nil {
		return err
	}
	var st store
	if o.redis != nil {
		rst, err := newRedisStore(ctx, *o.redis)
		if err != nil {
			return err
		}
		st = rst
	} else {
		lst, err := newLimiterStore(o.maxKeys, o.clock, rs.maxWindow())
		if err != nil {
			return err
		}
		if err := m.prom.TrackKeys("keyrate-rls", lst.l); err != nil {
			lst.Close()
			return err
		}
		st = lst
	}
	defer st.Close()
	svc, err := newService(st, m, log, rs)
	if err != nil {
		return err
	}
	m.configLoaded(nil)
	rl := &reloader{path: o.config, svc: svc, metrics: m, log: log}
	rl.loaded = sha256.Sum256(data)

	grpcLn, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return err
	}
	defer grpcLn.Close()
	httpLn, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return err
	}
	defer httpLn.Close()

	var ready atomic.Bool
	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	hsrv := &http.Server{
		Handler:           newHTTPHandler(svc, &ready, reg),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
	}

	served := make(chan error, 2)
	go func() { served <- gs.Serve(grpcLn) }()
	go func() { served <- hsrv.Serve(httpLn) }()
	reloadCtx, stopReload := context.WithCancel(context.Background())
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		rl.run(reloadCtx, o.reloadInterval, hup)
	}()
	ready.Store(true)
	fmt.Fprintf(stdout, "keyrate-rls serving gRPC on %s and HTTP on %s\n", grpcLn.Addr(), httpLn.Addr())
	log.Info("serving", "grpc", grpcLn.Addr().String(), "http", httpLn.Addr().String(),
		"domains", len(rs.domains), "rules", len(rs.rules))

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	ready.Store(false)
	hs.Shutdown()
	stopReload()
	<-reloaded
	if serveErr == nil && o.drainDelay > 0 {
		log.Info("draining: /healthcheck answers 503", "for", o.drainDelay)
		time.Sleep(o.drainDelay)
	}
	log.Info("shutting down")

	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := hsrv.Shutdown(sctx); err != nil {
		log.Warn("HTTP calls still in flight at the shutdown timeout were cut", "err", err)
	}
	select {
	case <-stopped:
	case <-sctx.Done():
		log.Warn("gRPC calls still in flight at the shutdown timeout were cut")
		gs.Stop()
		<-stopped
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, grpc.ErrServerStopped) {
		return serveErr
	}
	return nil
}
