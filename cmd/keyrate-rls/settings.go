package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The environment variables of envoyproxy/ratelimit that keyrate-rls
// reads, with their meaning there: its users configure it with them, and
// keyrate-rls starts from the same environment. Flags, where both exist,
// win over them. A variable that asks for something keyrate-rls does not
// do is named at start-up, in a WARN line, or, where going on without it
// would be unsafe (TLS, another store, another source of rules), refused.

// env reads the environment: os.LookupEnv, or a map in tests.
type env func(name string) (string, bool)

// settings reads envoyproxy/ratelimit's environment into o's defaults,
// before the flags are parsed over them.
type settings struct {
	get  env
	o    *options
	errs []error
}

// str returns name's value and whether it is set (to anything but "").
func (s *settings) str(name string) (string, bool) {
	v, ok := s.get(name)
	return v, ok && v != ""
}

func (s *settings) boolean(name string, def bool) bool {
	v, ok := s.str(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s is %q, want true or false", name, v))
		return def
	}
	return b
}

func (s *settings) integer(name string, def int) int {
	v, ok := s.str(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		s.errs = append(s.errs, fmt.Errorf("%s is %q, want a whole number, 0 or more", name, v))
		return def
	}
	return n
}

func (s *settings) duration(name string, def time.Duration) time.Duration {
	v, ok := s.str(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		s.errs = append(s.errs, fmt.Errorf("%s is %q, want a duration such as 10s", name, v))
		return def
	}
	return d
}

// warn names a setting that is not honoured, with why.
func (s *settings) warn(format string, args ...any) {
	s.o.warnings = append(s.o.warnings, fmt.Sprintf(format, args...))
}

// unsupported refuses a setting that would be unsafe to go on without.
func (s *settings) unsupported(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf(format, args...))
}

// readEnv sets o from the environment. It returns an error naming every
// variable it cannot read or that keyrate-rls refuses to start with.
func readEnv(get env, o *options) error {
	s := &settings{get: get, o: o}
	s.listeners()
	s.rules()
	s.logs()
	s.stats()
	s.answers()
	s.backend()
	s.ignored()
	return errors.Join(s.errs...)
}

// hostPort returns the address of a host and port variable pair, each
// defaulting to the service's own default address's.
func (s *settings) hostPort(hostVar, portVar, def string) string {
	host, port, _ := net.SplitHostPort(def)
	if h, ok := s.str(hostVar); ok {
		host = h
	}
	if p, ok := s.str(portVar); ok {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			s.errs = append(s.errs, fmt.Errorf("%s is %q, want a port number", portVar, p))
		} else {
			port = p
		}
	}
	return net.JoinHostPort(host, port)
}

// defaultDebugAddr is where the debug server listens when DEBUG_PORT or
// DEBUG_HOST alone is set: envoyproxy/ratelimit's port, on loopback.
const defaultDebugAddr = "127.0.0.1:6070"

// listeners reads where the service listens: HOST/PORT (HTTP: health
// checks, /json), GRPC_HOST/GRPC_PORT or GRPC_UDS, DEBUG_HOST/DEBUG_PORT
// (the debug server, served only when one of them is set), and the
// gRPC connections' age.
func (s *settings) listeners() {
	o := s.o
	o.httpAddr = s.hostPort("HOST", "PORT", o.httpAddr)
	o.grpcAddr = s.hostPort("GRPC_HOST", "GRPC_PORT", o.grpcAddr)
	o.grpcUDS, _ = s.str("GRPC_UDS")
	_, host := s.str("DEBUG_HOST")
	_, port := s.str("DEBUG_PORT")
	if host || port {
		// Loopback unless DEBUG_HOST says otherwise: the debug server
		// serves pprof (the command line, profiles) and the rules, for
		// whoever can reach it. envoyproxy/ratelimit binds 0.0.0.0.
		o.debugAddr = s.hostPort("DEBUG_HOST", "DEBUG_PORT", defaultDebugAddr)
	}
	o.grpc.maxAge = s.duration("GRPC_MAX_CONNECTION_AGE", o.grpc.maxAge)
	o.grpc.maxAgeGrace = s.duration("GRPC_MAX_CONNECTION_AGE_GRACE", o.grpc.maxAgeGrace)
	if s.boolean("GRPC_SERVER_USE_TLS", false) {
		s.unsupported("GRPC_SERVER_USE_TLS is true: keyrate-rls serves gRPC without TLS; terminate TLS in front of it (a sidecar, a mesh)")
	}
}

// rules reads where the rules come from: the runtime directory
// (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY,
// RUNTIME_WATCH_ROOT, RUNTIME_IGNOREDOTFILES; used when -config is not
// given) and how its files combine.
func (s *settings) rules() {
	o := s.o
	if v, ok := s.str("CONFIG_TYPE"); ok && !strings.EqualFold(v, "FILE") {
		s.unsupported("CONFIG_TYPE is %q: keyrate-rls reads its rules from files only (FILE), not from an xDS server", v)
	}
	if v, ok := s.str("RUNTIME_ROOT"); ok {
		o.runtime.root = v
	}
	o.runtime.sub, _ = s.str("RUNTIME_SUBDIRECTORY")
	if v, ok := s.str("RUNTIME_APPDIRECTORY"); ok {
		o.runtime.app = v
	}
	s.boolean("RUNTIME_WATCH_ROOT", true) // either way, every change is seen (see runtimeDir)
	o.runtime.ignoreDotFiles = s.boolean("RUNTIME_IGNOREDOTFILES", false)
	o.merge = s.boolean("MERGE_DOMAIN_CONFIG", false)
	o.healthyWithConfig = s.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
}

// logs reads LOG_LEVEL and LOG_FORMAT: logrus's level names, and json or
// text.
func (s *settings) logs() {
	o := s.o
	if v, ok := s.str("LOG_LEVEL"); ok {
		switch strings.ToLower(v) {
		case "trace", "debug":
			o.logLevel = "debug"
		case "info":
			o.logLevel = "info"
		case "warn", "warning":
			o.logLevel = "warn"
		case "error", "fatal", "panic":
			o.logLevel = "error"
		default:
			s.errs = append(s.errs, fmt.Errorf("LOG_LEVEL is %q, want debug, info, warn or error", v))
		}
	}
	if v, ok := s.str("LOG_FORMAT"); ok {
		o.logFormat = "text"
		if strings.EqualFold(v, "json") {
			o.logFormat = "json"
		}
	}
}

// stats reads the statistics settings. Metrics are Prometheus's, on the
// HTTP port's /metrics, and with USE_PROMETHEUS also on PROMETHEUS_ADDR
// and PROMETHEUS_PATH, as envoyproxy/ratelimit serves them; statsd sinks
// are not.
func (s *settings) stats() {
	o := s.o
	if s.boolean("USE_PROMETHEUS", false) {
		o.promAddr = ":9090"
		if v, ok := s.str("PROMETHEUS_ADDR"); ok {
			o.promAddr = v
		}
		o.promPath = "/metrics"
		if v, ok := s.str("PROMETHEUS_PATH"); ok {
			o.promPath = v
		}
	}
	if _, ok := s.str("PROMETHEUS_MAPPER_YAML"); ok {
		s.warn("PROMETHEUS_MAPPER_YAML is not read: metrics carry envoyproxy/ratelimit's default mapping's names, with domain and rule labels")
	}
	o.responseMillis = s.boolean("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)
	if s.boolean("USE_STATSD", false) {
		s.warn("USE_STATSD is true: keyrate-rls sends no statsd; its metrics are Prometheus's, on /metrics")
	}
	if s.boolean("USE_DOG_STATSD", false) {
		s.warn("USE_DOG_STATSD is true: keyrate-rls sends no DogStatsD; its metrics are Prometheus's, on /metrics")
	}
	if s.boolean("DISABLE_STATS", false) {
		s.warn("DISABLE_STATS is true: metrics are still kept and served on /metrics")
	}
	if _, ok := s.str("EXTRA_TAGS"); ok {
		s.warn("EXTRA_TAGS is not applied: add labels where Prometheus scrapes")
	}
	if v, ok := s.str("NEAR_LIMIT_RATIO"); ok {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			s.errs = append(s.errs, fmt.Errorf("NEAR_LIMIT_RATIO is %q, want a share from 0 to 1", v))
		} else {
			o.nearRatio = r
		}
	}
}

// answers reads what changes the answers: SHADOW_MODE, QUOTA_MODE,
// RESPONSE_DYNAMIC_METADATA, and the response headers
// (LIMIT_RESPONSE_HEADERS_ENABLED and the names LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
func (s *settings) answers() {
	o := s.o
	o.service.shadow = s.boolean("SHADOW_MODE", false)
	o.service.quota = s.boolean("QUOTA_MODE", false)
	o.service.dynamicMetadata = s.boolean("RESPONSE_DYNAMIC_METADATA", false)
	if s.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		h := &o.service.headers
		h.limit, h.remaining, h.reset = defaultLimitHeader, defaultRemainingHeader, defaultResetHeader
		for _, v := range []struct {
			name string
			to   *string
		}{{"LIMIT_LIMIT_HEADER", &h.limit}, {"LIMIT_REMAINING_HEADER", &h.remaining}, {"LIMIT_RESET_HEADER", &h.reset}} {
			if name, ok := s.str(v.name); ok {
				*v.to = name
			}
		}
	}
	if !s.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", true) {
		s.warn("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is false: keyrate-rls never counts a refused request, as with true")
	}
}

// backend reads where budgets live. BACKEND_TYPE=redis, or REDIS_URL,
// puts them in Redis as envoyproxy/ratelimit does: REDIS_SOCKET_TYPE,
// REDIS_TYPE (SINGLE, CLUSTER or SENTINEL), REDIS_URL, REDIS_POOL_SIZE,
// REDIS_AUTH, REDIS_TLS and its files, REDIS_TIMEOUT, CACHE_KEY_PREFIX;
// neither keeps them in this process, keyrate-rls's own default.
func (s *settings) backend() {
	o := s.o
	backend, set := s.str("BACKEND_TYPE")
	url, hasURL := s.str("REDIS_URL")
	switch {
	case set && strings.EqualFold(backend, "memcache"):
		s.unsupported("BACKEND_TYPE is memcache: keyrate-rls keeps budgets in this process or in Redis (BACKEND_TYPE=redis and REDIS_URL)")
		return
	case set && !strings.EqualFold(backend, "redis"):
		s.unsupported("BACKEND_TYPE is %q, want redis (or unset: budgets in this process)", backend)
		return
	case !set && !hasURL:
		s.noRedis()
		return
	case !hasURL:
		url = "/var/run/nutcracker/ratelimit.sock" // envoyproxy/ratelimit's default
	}
	r := o.redisEnv
	r.set = true
	r.url = url
	r.socket, _ = s.str("REDIS_SOCKET_TYPE")
	r.kind = "SINGLE"
	if v, ok := s.str("REDIS_TYPE"); ok {
		r.kind = strings.ToUpper(v)
	}
	r.poolSize = s.integer("REDIS_POOL_SIZE", 10)
	r.auth, _ = s.str("REDIS_AUTH")
	r.sentinelAuth, _ = s.str("REDIS_SENTINEL_AUTH")
	r.tls = s.boolean("REDIS_TLS", false)
	r.tlsCert, _ = s.str("REDIS_TLS_CLIENT_CERT")
	r.tlsKey, _ = s.str("REDIS_TLS_CLIENT_KEY")
	r.tlsCA, _ = s.str("REDIS_TLS_CACERT")
	r.tlsSkipVerify = s.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)
	o.redisEnv = r
	o.redisTimeout = s.duration("REDIS_TIMEOUT", o.redisTimeout)
	o.redisLeases = s.duration("KEYRATE_REDIS_LEASES", 0)
	if v, ok := s.str("CACHE_KEY_PREFIX"); ok {
		o.redisPrefix = v
	}
	if _, ok := s.str("LOCAL_CACHE_SIZE_IN_BYTES"); ok {
		if n := s.integer("LOCAL_CACHE_SIZE_IN_BYTES", 0); n == 0 {
			o.redisDenyCache = 0
		} else {
			s.warn("LOCAL_CACHE_SIZE_IN_BYTES is %d: the deny cache that stands for envoyproxy/ratelimit's local cache is bounded in budgets, not bytes: it holds %d (-redis-deny-cache)",
				n, o.redisDenyCache)
		}
	}
	if s.boolean("REDIS_PERSECOND", false) {
		s.warn("REDIS_PERSECOND is true: per-second limits live in the one Redis of REDIS_URL; the REDIS_PERSECOND_* settings are not read")
	}
	for _, name := range []string{"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM"} {
		if _, ok := s.str(name); ok {
			s.warn("%s is not read: redislimit decides each request in one script run", name)
		}
	}
	if v, ok := s.str("REDIS_POOL_ON_EMPTY_BEHAVIOR"); ok && !strings.EqualFold(v, "WAIT") {
		s.warn("REDIS_POOL_ON_EMPTY_BEHAVIOR is %q: a call waits for a free connection, within -redis-timeout (WAIT)", v)
	}
	if s.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false) {
		s.warn("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION is true: /healthcheck does not ask Redis; while Redis is down, requests fail fast or go to -redis-fallback")
	}
	for _, name := range []string{"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"} {
		if _, ok := s.str(name); ok {
			s.warn("%s is not read: keyrate-rls asks Redis once at start, for 5s, and stops if it does not answer", name)
		}
	}
	if _, ok := s.str("EXPIRATION_JITTER_MAX_SECONDS"); ok {
		s.warn("EXPIRATION_JITTER_MAX_SECONDS is not read: each budget in Redis expires when its window has let its last hit go")
	}
}

// noRedis warns of Redis settings given with budgets in process.
func (s *settings) noRedis() {
	for _, name := range []string{"REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH",
		"REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
		"REDIS_TIMEOUT", "REDIS_PERSECOND", "REDIS_PERSECOND_URL", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
		"REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
		"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
		"CACHE_KEY_PREFIX", "LOCAL_CACHE_SIZE_IN_BYTES", "EXPIRATION_JITTER_MAX_SECONDS"} {
		if _, ok := s.str(name); ok {
			s.warn("%s is not read: budgets live in this process (set REDIS_URL, or BACKEND_TYPE=redis, for Redis)", name)
		}
	}
}

// ignored warns of the settings of what keyrate-rls does not do.
func (s *settings) ignored() {
	if s.boolean("TRACING_ENABLED", false) {
		s.warn("TRACING_ENABLED is true: keyrate-rls sends no traces")
	}
	for _, name := range []string{"MEMCACHE_HOST_PORT", "MEMCACHE_SRV"} {
		if _, ok := s.str(name); ok {
			s.warn("%s is not read: keyrate-rls keeps no budgets in Memcached", name)
		}
	}
}
