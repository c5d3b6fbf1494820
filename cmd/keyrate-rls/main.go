// Command keyrate-rls is a rate limit service for Envoy (and Istio, Envoy
// Gateway, anything that speaks envoy.service.ratelimit.v3): it answers
// ShouldRateLimit with keyrate's exact sliding windows, a drop-in for
// envoyproxy/ratelimit. It starts as that service starts, from its
// environment variables (RUNTIME_ROOT, GRPC_PORT, REDIS_URL, ...; see
// settings.go) and its runtime directory of rules, one domain or more a
// file, watched for changes; or from one file and flags, which win over
// the environment:
//
//	keyrate-rls [-config rules.yaml] [-grpc :8081] [-http :8082] [-debug ADDR]
//	            [-reload-interval 5s] [-max-keys 1000000] [-drain-delay 0] [-shutdown-timeout 10s]
//	            [-log-level info] [-log-format text] [-ratelimit-fields]
//	            [-max-overrides-per-domain 64] [-max-conns 4096] [-max-conns-per-addr 256]
//	            [-max-streams-per-conn 128] [-max-in-flight 4096] [-max-reading 64]
//	            [-request-read-timeout 5s] [-conn-request-timeout 10s]
//	            [-redis host:port | -redis-cluster host:port,...] [-redis-prefix keyrate-rls:]
//	            [-redis-timeout 10s] [-redis-deny-cache 10000] [-redis-deny-cache-max-hold 1s]
//	            [-redis-fallback 0] [-redis-resolution 0] [-redis-leases 0] [-redis-hash-tag-secret-file FILE]
//
// A setting of envoyproxy/ratelimit that keyrate-rls does not honour is
// named at start, in a WARN line; one it would be unsafe to run without
// (TLS, Memcached, xDS) stops it.
//
// Every descriptor of a request is decided together, each at its own
// hits_addend, all or nothing: a request one descriptor refuses counts
// against none of the others, and a refused request counts nowhere. A
// descriptor may be under several limits at once, and a limit's window
// may be any duration (window: 3s), besides envoyproxy/ratelimit's units.
// See README.md for the configuration, how to point Envoy at it, the
// bounds it keeps against its clients, and how it differs from
// envoyproxy/ratelimit.
//
// The gRPC address serves envoy.service.ratelimit.v3.RateLimitService,
// grpc.health.v1.Health and server reflection; the HTTP address serves GET
// /healthcheck (200 when ready, 503 once a shutdown begins), POST /json (a
// RateLimitRequest in protojson, answered in protojson, with status 429
// when over the limit) and GET /metrics (Prometheus). Connections on all
// ports are bounded together, per client address and in total, so that
// no clients can lock others out.
//
// Budgets live in this process, right for one replica; with Redis
// (REDIS_URL, -redis, -redis-cluster) they live in Redis, one budget
// across every replica using it, each request still decided all or
// nothing in one script run (on a Cluster, a request's budgets share the
// slot of its domain). While Redis cannot answer, requests fail with
// UNAVAILABLE at once after the first (a circuit breaker), or, with
// -redis-fallback SHARE, are decided in the process at that share of each
// limit. The first line of standard output gives the addresses it listens
// on ("keyrate-rls serving gRPC on ADDR and HTTP on ADDR"), so that port 0
// picks free ports a script can read back; logs go to standard error. The
// rules are read again on every change seen, every -reload-interval and on
// SIGHUP, and loaded when they changed: counts carry over, and invalid
// rules are logged and change nothing. SIGINT or SIGTERM shut the service
// down gracefully: it answers 503 to health checks for -drain-delay, then
// waits up to -shutdown-timeout for the calls in flight.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/keyrate/keyrate"
)

func main() {
	opts, err := parseOptions(os.Args[1:], os.LookupEnv, os.Stderr)
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
	// config is -config's file; "" reads the runtime directory instead.
	config  string
	runtime runtimeDir
	merge   bool // MERGE_DOMAIN_CONFIG

	grpcAddr, grpcUDS  string // gRPC: an address, or a Unix socket (GRPC_UDS) instead
	httpAddr           string
	debugAddr          string // "": no debug server
	promAddr, promPath string // "": /metrics on the HTTP address only

	reloadInterval  time.Duration
	maxKeys         int
	shutdownTimeout time.Duration
	drainDelay      time.Duration
	logLevel        string
	logFormat       string
	level           slog.Level
	logJSON         bool

	// redis is where budgets live when set; nil: in this process.
	redis *redisOptions
	// What the environment says of Redis, before the flags.
	redisEnv       redisEnv
	redisTimeout   time.Duration
	redisLeases    time.Duration // KEYRATE_REDIS_LEASES
	redisPrefix    string
	redisDenyCache int

	service           serviceOptions
	nearRatio         float64 // NEAR_LIMIT_RATIO
	responseMillis    bool    // PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
	healthyWithConfig bool    // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED

	maxConns, maxConnsPerAddr int
	connRequestTimeout        time.Duration // a connection with no request by then is closed
	grpc                      grpcLimits

	// warnings name the settings given that are not honoured, logged at
	// start.
	warnings []string

	// clock decides on a keyrate.ManualClock in tests; nil is the system
	// clock. No flag sets it.
	clock keyrate.Clock
}

// defaultRedisTimeout is the time budget of a call to Redis: that of
// envoyproxy/ratelimit's REDIS_TIMEOUT. A service waits for Redis as long
// as its caller does: Envoy's own timeout (the filter's timeout, 20ms by
// default) ends a call sooner, and answering UNAVAILABLE earlier only
// turns a slow answer into none, which Envoy admits by default.
const defaultRedisTimeout = 10 * time.Second

// defaultHTTPAddr is the HTTP server's address without -http, HOST or
// PORT. envoyproxy/ratelimit's port is 8080, which the keyrate demo and
// many development servers take: PORT=8080 gives that one back.
const defaultHTTPAddr = ":8082"

// defaultOptions are the settings before the environment and the flags.
func defaultOptions() options {
	return options{
		runtime:            runtimeDir{root: defaultRuntimeRoot, app: "config"},
		grpcAddr:           ":8081",
		httpAddr:           defaultHTTPAddr,
		reloadInterval:     5 * time.Second,
		maxKeys:            1_000_000,
		shutdownTimeout:    10 * time.Second,
		logLevel:           "info",
		logFormat:          "text",
		redisTimeout:       defaultRedisTimeout,
		redisPrefix:        defaultRedisPrefix,
		redisDenyCache:     10_000,
		nearRatio:          defaultNearLimitRatio,
		maxConns:           defaultMaxConns,
		maxConnsPerAddr:    defaultMaxConnsPerAddr,
		connRequestTimeout: defaultConnRequestTimeout,
		grpc:               defaultGRPCLimits,
	}
}

// parseFlags reads the command line alone, with no environment.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	return parseOptions(args, func(string) (string, bool) { return "", false }, stderr)
}

// parseOptions reads envoyproxy/ratelimit's environment (see settings.go),
// then the command line, whose flags win over it.
func parseOptions(args []string, get env, stderr io.Writer) (options, error) {
	o := defaultOptions()
	envErr := readEnv(get, &o)
	fs := flag.NewFlagSet("keyrate-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.serviceFlags(fs)
	rf := o.redisFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if envErr != nil {
		return o, envErr
	}
	if err := o.setRedis(fs, rf); err != nil {
		return o, err
	}
	if err := o.check(fs.Args()); err != nil {
		return o, err
	}
	o.logJSON = o.logFormat == "json"
	return o, nil
}

// serviceFlags defines on fs the flags of everything but Redis, each
// defaulting to o's setting and setting it.
func (o *options) serviceFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", "", "the rules: envoyproxy/ratelimit's YAML, with keyrate's extensions (default: the runtime directory, RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY)")
	fs.StringVar(&o.grpcAddr, "grpc", o.grpcAddr, "address of the gRPC server (port 0 picks a free one; GRPC_HOST, GRPC_PORT)")
	fs.StringVar(&o.httpAddr, "http", o.httpAddr, "address of the HTTP server: /healthcheck, /json, /metrics (port 0 picks a free one; HOST, PORT)")
	fs.StringVar(&o.debugAddr, "debug", o.debugAddr, "address of the debug server: /rlconfig, /metrics, /debug/pprof/ (DEBUG_HOST, DEBUG_PORT; default none)")
	fs.DurationVar(&o.reloadInterval, "reload-interval", o.reloadInterval, "how often to read the rules again besides on changes and SIGHUP (0: never)")
	fs.IntVar(&o.maxKeys, "max-keys", o.maxKeys, "budgets tracked at once; past it, the budgets decided least recently are forgotten to make room (0: no bound)")
	fs.DurationVar(&o.drainDelay, "drain-delay", o.drainDelay, "how long a shutdown keeps serving, /healthcheck answering 503, before it stops taking calls: time for load balancers to notice")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", o.shutdownTimeout, "how long a shutdown waits for calls in flight")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error (LOG_LEVEL)")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "text or json (LOG_FORMAT)")
	fs.BoolVar(&o.service.headers.fields, "ratelimit-fields", false, "add the IETF RateLimit-Policy and RateLimit fields to the responses Envoy sends, a member per limit of each descriptor")
	fs.IntVar(&o.service.maxOverridesPerDomain, "max-overrides-per-domain", defaultOverridesPerDomain, "distinct limit overrides each domain holds at once; one more takes the place of the least recently used")
	fs.IntVar(&o.maxConns, "max-conns", o.maxConns, "connections open at once on all ports together (at most the file descriptors allow); past it, a new one takes the place of the one idle longest")
	fs.DurationVar(&o.connRequestTimeout, "conn-request-timeout", o.connRequestTimeout, "how long a connection may stay open without sending a whole request before it is closed")
	fs.IntVar(&o.maxConnsPerAddr, "max-conns-per-addr", o.maxConnsPerAddr, "connections open at once from one client address (an IPv6 /64); more are closed at once")
	fs.IntVar(&o.grpc.streamsPerConn, "max-streams-per-conn", o.grpc.streamsPerConn, "concurrent gRPC calls on one connection")
	fs.IntVar(&o.grpc.inFlight, "max-in-flight", o.grpc.inFlight, "gRPC calls in flight on all connections together, counted once their request has come; more are refused with UNAVAILABLE")
	fs.DurationVar(&o.grpc.readTimeout, "request-read-timeout", o.grpc.readTimeout, "the longest a gRPC call may take from its headers to its complete request; past it the call ends")
	fs.IntVar(&o.grpc.reading, "max-reading", o.grpc.reading, "gRPC calls whose request is still being read, on all connections together, each holding up to 1 MiB of it; past it the one reading longest ends")
}

// redisFlagValues are the Redis flags as given, before setRedis reads
// them.
type redisFlagValues struct {
	addr, cluster string // -redis, -redis-cluster
	r             redisOptions
}

// redisFlags defines on fs the Redis flags, returning where they are set.
func (o *options) redisFlags(fs *flag.FlagSet) *redisFlagValues {
	rf := &redisFlagValues{}
	fs.StringVar(&rf.addr, "redis", "", "keep budgets in the Redis server at this host:port, one budget across every keyrate-rls using it (REDIS_URL; default: in this process)")
	fs.StringVar(&rf.cluster, "redis-cluster", "", "keep budgets in the Redis Cluster with these seed nodes, host:port,host:port,... (REDIS_TYPE=CLUSTER)")
	fs.StringVar(&rf.r.prefix, "redis-prefix", o.redisPrefix, "the prefix of every key written to Redis; replicas sharing budgets use the same (CACHE_KEY_PREFIX)")
	fs.DurationVar(&rf.r.timeout, "redis-timeout", o.redisTimeout, "the time budget of each call to Redis; a request's own deadline ends it sooner (REDIS_TIMEOUT)")
	fs.IntVar(&rf.r.denyCache, "redis-deny-cache", o.redisDenyCache, "keys whose refusal by Redis is held locally, refusing again without a round trip while it must stand (0: none)")
	fs.DurationVar(&rf.r.denyHold, "redis-deny-cache-max-hold", 0, "the longest the deny cache holds a refusal without asking Redis (default 1s)")
	fs.Float64Var(&rf.r.fallback, "redis-fallback", 0, "while Redis cannot answer, decide in this process at this share of each limit, in (0, 1]: 1/N for N replicas (default 0: answer UNAVAILABLE)")
	fs.DurationVar(&rf.r.resolution, "redis-resolution", 0, "record hits in Redis at this resolution, bounding a budget's memory by its window instead of its limit (default 0: exact)")
	fs.DurationVar(&rf.r.leases, "redis-leases", o.redisLeases, "decide busy descriptors in this process from leases of their Redis budget, each at most this long; exact across replicas, every decision looking back its window and this much more (KEYRATE_REDIS_LEASES; default 0: every decision in Redis)")
	fs.StringVar(&rf.r.secretFile, "redis-hash-tag-secret-file", "", "a file holding the secret (16 bytes or more) that keys the hash tags placing budgets in Cluster slots")
	return rf
}

// setRedis sets o's Redis from rf, the flags fs parsed, or else from the
// environment's Redis.
func (o *options) setRedis(fs *flag.FlagSet, rf *redisFlagValues) error {
	var redisSet []string // the -redis-... options given
	fs.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "redis-") && f.Name != "redis-cluster" {
			redisSet = append(redisSet, "-"+f.Name)
		}
	})
	if rf.addr == "" && rf.cluster == "" && o.redisEnv.set {
		// The environment's Redis, which the flags did not replace.
		addr, cluster, conn, err := o.redisEnv.fromEnv()
		if err != nil {
			return err
		}
		redisSet = nil
		rf.addr, rf.cluster, rf.r.conn = addr, strings.Join(cluster, ","), conn
		if conn.sentinelMaster == "" && addr == "" && len(cluster) == 0 {
			return errors.New("REDIS_URL is empty")
		}
	}
	redis, err := parseRedisFlags(rf.addr, rf.cluster, redisSet, rf.r)
	if err != nil {
		return err
	}
	if o.redis = redis; redis != nil {
		redis.fallbackKeys = o.maxKeys
		if redis.conn.sentinelMaster != "" {
			redis.addr = "" // the sentinels give the master's address
		}
	}
	return nil
}

// check returns an error naming the first setting of o out of its range,
// or the arguments left over; it reads -log-level into o.level.
func (o *options) check(args []string) error {
	switch {
	case len(args) > 0:
		return fmt.Errorf("unexpected arguments: %s", strings.Join(args, " "))
	case o.reloadInterval < 0:
		return fmt.Errorf("-reload-interval is %v, want 0 (off) or more", o.reloadInterval)
	case o.maxKeys < 0:
		return fmt.Errorf("-max-keys is %d, want 0 (no bound) or more", o.maxKeys)
	case o.drainDelay < 0:
		return fmt.Errorf("-drain-delay is %v, want 0 or more", o.drainDelay)
	case o.shutdownTimeout <= 0:
		return fmt.Errorf("-shutdown-timeout is %v, want more than 0", o.shutdownTimeout)
	case o.logFormat != "text" && o.logFormat != "json":
		return fmt.Errorf("-log-format is %q, want text or json", o.logFormat)
	case o.connRequestTimeout <= 0:
		return fmt.Errorf("-conn-request-timeout is %v, want more than 0", o.connRequestTimeout)
	case o.maxConns < 1 || o.maxConnsPerAddr < 1:
		return fmt.Errorf("-max-conns is %d and -max-conns-per-addr %d, want 1 or more", o.maxConns, o.maxConnsPerAddr)
	case o.grpc.streamsPerConn < 1 || o.grpc.inFlight < 1 || o.grpc.reading < 1:
		return fmt.Errorf("-max-streams-per-conn is %d, -max-in-flight %d and -max-reading %d, want 1 or more", o.grpc.streamsPerConn, o.grpc.inFlight, o.grpc.reading)
	case o.grpc.readTimeout <= 0:
		return fmt.Errorf("-request-read-timeout is %v, want more than 0", o.grpc.readTimeout)
	case o.service.maxOverridesPerDomain < 1:
		return fmt.Errorf("-max-overrides-per-domain is %d, want 1 or more", o.service.maxOverridesPerDomain)
	}
	if err := o.level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("-log-level is %q, want debug, info, warn or error", o.logLevel)
	}
	return nil
}

// source returns where o's rules come from.
func (o *options) source() source {
	if o.config != "" {
		return fileSource{path: o.config}
	}
	return o.runtime
}

// run serves until ctx ends, then shuts down gracefully. It writes the
// addresses it serves on to stdout and logs to stderr; hup asks for the
// rules to be read again.
func run(ctx context.Context, o options, hup <-chan os.Signal, stdout, stderr io.Writer) error {
	log := newLogger(o, stderr)
	for _, w := range o.warnings {
		log.Warn("setting not honoured: " + w)
	}
	src := o.source()
	if err := checkSource(src); err != nil {
		return err
	}
	m, reg, err := newRegistry(o)
	if err != nil {
		return err
	}
	rl := &reloader{src: src, merge: o.merge, metrics: m, log: log}
	rs, invalid, err := rl.first()
	if err != nil {
		return err
	}
	if invalid != nil {
		// As envoyproxy/ratelimit: start, log, and answer calls with an
		// error until valid rules load.
		log.Error("invalid configuration; no rules loaded: every call is answered UNAVAILABLE until valid rules load",
			"rules", src.String(), "err", invalid)
		m.configLoaded(invalid)
	}
	st, err := openStore(ctx, o, m, rs)
	if err != nil {
		return err
	}
	defer st.Close()
	o.service.clock = o.clock
	svc, err := newService(st, m, log, rs, o.service)
	if err != nil {
		return err
	}
	if invalid == nil {
		m.configLoaded(nil)
	}
	if len(rs.domains) == 0 && invalid == nil {
		log.Warn("no domain loaded: every request is answered OK until the rules hold one", "rules", src.String())
	}
	rl.svc = svc

	srv, err := newServers(o, svc, m, reg, log)
	if err != nil {
		return err
	}
	defer srv.close()
	srv.setRules(rs)
	rl.onLoad = srv.setRules
	return serve(ctx, o, srv, rl, rs, hup, stdout, log)
}

// newLogger returns the log o asks for, text or JSON, on stderr.
func newLogger(o options, stderr io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.level}
	if o.logJSON {
		return slog.New(slog.NewJSONHandler(stderr, hopts))
	}
	return slog.New(slog.NewTextHandler(stderr, hopts))
}

// openStore returns where budgets live: o's Redis, or this process, its
// keys counted in m.
func openStore(ctx context.Context, o options, m *metrics, rs *ruleSet) (store, error) {
	if o.redis != nil {
		rst, err := newRedisStore(ctx, *o.redis)
		if err != nil {
			return nil, err // not rst: a nil *redisStore in a store is no nil store
		}
		return rst, nil
	}
	lst, err := newLimiterStore(o.maxKeys, o.clock, rs.maxWindow())
	if err != nil {
		return nil, err
	}
	if err := m.prom.TrackKeys("keyrate-rls", lst.l); err != nil {
		lst.Close()
		return nil, err
	}
	return lst, nil
}

// serve runs srv and rl's reloads, rs loaded first, until ctx ends or a
// server fails, then drains for o.drainDelay and shuts down.
func serve(ctx context.Context, o options, srv *servers, rl *reloader, rs *ruleSet, hup <-chan os.Signal, stdout io.Writer, log *slog.Logger) error {
	reloadCtx, stopReload := context.WithCancel(context.Background())
	changed, err := watch(reloadCtx, rl.src, log)
	if err != nil {
		log.Warn("rules are not watched for changes; they are read again every -reload-interval and on SIGHUP", "err", err)
	}
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		rl.run(reloadCtx, o.reloadInterval, hup, changed)
	}()
	served := srv.serve()
	fmt.Fprintf(stdout, "keyrate-rls serving gRPC on %s and HTTP on %s\n", srv.grpcLn.Addr(), srv.httpLn.Addr())
	log.Info("serving", "grpc", srv.grpcLn.Addr().String(), "http", srv.httpLn.Addr().String(),
		"source", rl.src.String(), "domains", len(rs.domains), "rules", len(rs.rules), "max_conns", srv.pool.total)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	srv.notReady()
	stopReload()
	<-reloaded
	if changed != nil {
		for range changed { // the watcher has stopped once it closes changed
		}
	}
	if serveErr == nil && o.drainDelay > 0 {
		log.Info("draining: /healthcheck answers 503", "for", o.drainDelay)
		time.Sleep(o.drainDelay)
	}
	log.Info("shutting down")
	srv.shutdown(o.shutdownTimeout, log)
	return srv.err(serveErr)
}
