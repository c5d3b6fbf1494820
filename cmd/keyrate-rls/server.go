package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Connection defaults. A connection costs a file descriptor and some 20 to
// 40 KB once idle; Envoy holds one or a few per worker thread to each
// replica, so the defaults leave ample room for a fleet of Envoys and
// bound a flood of idle connections to about 150 MB.
const (
	defaultMaxConns        = 4096
	defaultMaxConnsPerAddr = 256
	// defaultConnRequestTimeout closes a connection that has sent no
	// request by then: Envoy opens a connection to send one.
	defaultConnRequestTimeout = 10 * time.Second
	// fileReserve is the file descriptors kept for all but client
	// connections (Redis, the rules, logs) when the limit of open files
	// bounds -max-conns.
	fileReserve = 256
)

// grpcLimits bound what gRPC clients hold.
type grpcLimits struct {
	// streamsPerConn is the concurrent calls a connection may have (the
	// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS the server sends): Envoy
	// opens another connection when it needs more.
	streamsPerConn int
	// inFlight bounds the calls in flight on all connections together,
	// each a goroutine and buffers, counted once their request has come
	// (see callGate).
	inFlight int
	// readTimeout bounds the time from a call's headers to its complete
	// request, and reading the calls whose request is still being read,
	// each holding up to maxMessage bytes of it (see callGate).
	readTimeout time.Duration
	reading     int
	// maxAge and maxAgeGrace are GRPC_MAX_CONNECTION_AGE and its _GRACE:
	// how long a connection lives before the server asks its client to
	// move to a new one, and how long it then has.
	maxAge, maxAgeGrace time.Duration
	// idle closes a connection with no call for that long.
	idle time.Duration
}

// defaultGRPCLimits: 128 concurrent calls per connection is more than an
// Envoy worker has in flight to one replica at tens of thousands of
// requests a second; 4,096 calls in flight is some 50 MB at most. Envoy
// sends a request with its headers, read in microseconds: 5s is ample
// for a slow network, and 64 calls reading at once hold at most 64 MiB
// of partial requests.
var defaultGRPCLimits = grpcLimits{
	streamsPerConn: 128,
	inFlight:       4096,
	readTimeout:    5 * time.Second,
	reading:        64,
	maxAge:         24 * time.Hour, // envoyproxy/ratelimit's defaults
	maxAgeGrace:    time.Hour,
	idle:           5 * time.Minute,
}

// The keepalive policy: the server pings a connection idle for
// keepaliveTime and closes it when no answer comes within keepaliveTimeout
// (a client gone without closing); a client that pings more often than
// every minPingInterval is told to go away (a ping flood costs the server
// a reply each).
const (
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	minPingInterval  = 5 * time.Second
	// handshakeTimeout closes a connection that has not sent the HTTP/2
	// preface by then.
	handshakeTimeout = 10 * time.Second
	// maxMessage bounds a request's size and its headers'. A request with
	// every descriptor Envoy allows fits many times over.
	maxMessage = 1 << 20
)

// servers are the service's listeners and servers: gRPC, HTTP, and the
// optional debug and Prometheus ones, all under one connection pool.
type servers struct {
	pool                   *connPool
	grpcLn, httpLn         net.Listener
	debugLn, promLn        net.Listener // nil when not served
	gs                     *grpc.Server
	hs                     *health.Server
	hsrv, debugSrv, prmSrv *http.Server
	healthyWithConfig      bool
	ready, hasDomains      atomic.Bool
	rules                  atomic.Pointer[ruleSet]
}

// newRegistry returns the metrics for o, and their registry.
func newRegistry(o options) (*metrics, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := newMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	m.nearRatio, m.responseMillis, m.redis = o.nearRatio, o.responseMillis, o.redis != nil
	return m, reg, nil
}

// newServers listens on o's addresses and returns the servers of svc,
// not yet serving.
func newServers(o options, svc *service, m *metrics, reg *prometheus.Registry, log *slog.Logger) (*servers, error) {
	total := o.maxConns
	if limit := fileLimit(); limit > 0 && total > limit-fileReserve {
		total = max(limit-fileReserve, 64)
		log.Warn("-max-conns lowered to what the limit of open files allows", "max_conns", total, "open_files", limit)
	}
	s := &servers{pool: newConnPool(total, o.maxConnsPerAddr, o.connRequestTimeout), healthyWithConfig: o.healthyWithConfig}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keyrate_rls_connections",
		Help: "Connections open on all ports, at most -max-conns.",
	}, func() float64 { return float64(s.pool.Open()) }))
	if err := s.listen(o); err != nil {
		s.close()
		return nil, err
	}
	s.gs = newGRPCServer(o.grpc, s.pool, m, reg)
	rlspb.RegisterRateLimitServiceServer(s.gs, svc)
	s.hs = health.NewServer()
	healthpb.RegisterHealthServer(s.gs, s.hs)
	reflection.Register(s.gs) // so that grpcurl lists and describes the services
	s.hsrv = httpServer(newHTTPHandler(svc, s.healthy, reg), 15*time.Second)
	if s.debugLn != nil {
		s.debugSrv = httpServer(s.debugHandler(reg), time.Minute) // a CPU profile takes 30s
	}
	if s.promLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET "+o.promPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		s.prmSrv = httpServer(mux, 15*time.Second)
	}
	for _, h := range []*http.Server{s.hsrv, s.debugSrv, s.prmSrv} {
		if h != nil {
			h.ConnState = s.pool.connState
		}
	}
	return s, nil
}

// listen opens s's listeners on o's addresses: gRPC (TCP, or a Unix
// socket), HTTP, and the debug and Prometheus ones where o has them. On an
// error the listeners opened so far stay in s, for s.close.
func (s *servers) listen(o options) error {
	var err error
	if o.grpcUDS != "" {
		if fi, err := os.Lstat(o.grpcUDS); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(o.grpcUDS) // left by a process that did not exit cleanly
		}
		s.grpcLn, err = net.Listen("unix", o.grpcUDS)
	} else {
		s.grpcLn, err = net.Listen("tcp", o.grpcAddr)
	}
	if err != nil {
		return err
	}
	if s.httpLn, err = net.Listen("tcp", o.httpAddr); err != nil {
		return err
	}
	if o.debugAddr != "" {
		if s.debugLn, err = net.Listen("tcp", o.debugAddr); err != nil {
			return err
		}
	}
	if o.promAddr != "" {
		if s.promLn, err = net.Listen("tcp", o.promAddr); err != nil {
			return err
		}
	}
	return nil
}

// newGRPCServer returns the gRPC server, its calls bounded by g (a
// callGate over pool, its counts registered in reg) and timed in m.
func newGRPCServer(g grpcLimits, pool *connPool, m *metrics, reg *prometheus.Registry) *grpc.Server {
	gate := &callGate{readTimeout: g.readTimeout, maxReading: g.reading, maxInFlight: int64(g.inFlight), requested: pool.requested}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keyrate_rls_grpc_calls_reading",
		Help: "gRPC calls whose request is still being read, at most -max-reading.",
	}, func() float64 { return float64(gate.Reading()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keyrate_rls_grpc_calls_in_flight",
		Help: "gRPC calls whose request has come, not yet answered, at most -max-in-flight.",
	}, func() float64 { return float64(gate.InFlight()) }))
	return grpc.NewServer(
		grpc.MaxConcurrentStreams(uint32(g.streamsPerConn)),
		grpc.InTapHandle(gate.tap),
		grpc.ChainStreamInterceptor(gate.stream),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     g.idle,
			MaxConnectionAge:      g.maxAge,
			MaxConnectionAgeGrace: g.maxAgeGrace,
			Time:                  keepaliveTime,
			Timeout:               keepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxHeaderListSize(maxMessage),
		grpc.ChainUnaryInterceptor(gate.unary, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			start := time.Now()
			resp, err := h(ctx, req)
			m.served(info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:], time.Since(start))
			return resp, err
		}),
	)
}

// httpServer returns a server of h with timeouts that keep idle and slow
// clients from holding its connections.
func httpServer(h http.Handler, write time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      write,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// debugHandler serves envoyproxy/ratelimit's debug endpoints that mean
// something here: /rlconfig (the rules loaded), /stats, /metrics and the
// pprof profiles.
func (s *servers) debugHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	endpoints := map[string]string{
		"/rlconfig":     "print out the currently loaded configuration for debugging",
		"/stats":        "print out stats",
		"/metrics":      "the metrics, in Prometheus's format",
		"/debug/pprof/": "root of various pprof endpoints. hit for help.",
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		for _, p := range []string{"/debug/pprof/", "/metrics", "/rlconfig", "/stats"} {
			fmt.Fprintf(w, "%s: %s\n", p, endpoints[p])
		}
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeStats(w, reg)
	})
	mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if rs := s.rules.Load(); rs != nil {
			io.WriteString(w, rs.dump())
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// cmdline serves /debug/pprof/cmdline as pprof does, the command line's
// arguments separated by NULs, but with the password of every redis:// or
// rediss:// URL in them (-redis, -redis-cluster) redacted.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = redactURLs(a)
	}
	io.WriteString(w, strings.Join(args, "\x00"))
}

// redactURLs returns s with each redis:// or rediss:// URL in it, up to
// the next comma, redacted (see redactAddr).
func redactURLs(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "redis://")
		if j := strings.Index(s, "rediss://"); j >= 0 && (i < 0 || j < i) {
			i = j
		}
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i:]
		end := strings.IndexByte(s, ',')
		if end < 0 {
			end = len(s)
		}
		b.WriteString(redactAddr(s[:end]))
		s = s[end:]
	}
}

// writeStats writes /stats: every counter and gauge of reg, a line each,
// "name{labels}: value", in the plain text form of envoyproxy/ratelimit's
// /stats, under the names /metrics gives them. Labels never hold a value
// a request sent, so neither does this page.
func writeStats(w io.Writer, reg prometheus.Gatherer) {
	families, err := reg.Gather()
	if err != nil && len(families) == 0 {
		fmt.Fprintf(w, "# gathering the metrics: %v\n", err)
		return
	}
	var b []byte
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			default:
				continue // histograms and summaries: /metrics has them
			}
			b = append(b[:0], f.GetName()...)
			if len(m.GetLabel()) > 0 {
				b = append(b, '{')
				for i, l := range m.GetLabel() {
					if i > 0 {
						b = append(b, ',')
					}
					b = append(b, l.GetName()...)
					b = append(b, '=')
					b = strconv.AppendQuote(b, l.GetValue())
				}
				b = append(b, '}')
			}
			b = append(b, ": "...)
			b = strconv.AppendFloat(b, v, 'f', -1, 64)
			b = append(b, '\n')
			w.Write(b)
		}
	}
}

// setRules records the rules loaded, for /rlconfig and the health checks.
func (s *servers) setRules(rs *ruleSet) {
	s.rules.Store(rs)
	s.hasDomains.Store(len(rs.domains) > 0)
	s.updateHealth()
}

// healthy reports whether /healthcheck answers 200: serving, and with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, with a domain loaded.
func (s *servers) healthy() bool {
	return s.ready.Load() && (!s.healthyWithConfig || s.hasDomains.Load())
}

func (s *servers) updateHealth() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if s.healthy() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.hs.SetServingStatus("", st)
}

// serve starts every server; the channel gets the first one's error.
func (s *servers) serve() <-chan error {
	served := make(chan error, 4)
	go func() { served <- s.gs.Serve(s.pool.listen(s.grpcLn)) }()
	go func() { served <- s.hsrv.Serve(s.pool.listen(s.httpLn)) }()
	if s.debugSrv != nil {
		go func() { served <- s.debugSrv.Serve(s.pool.listen(s.debugLn)) }()
	}
	if s.prmSrv != nil {
		go func() { served <- s.prmSrv.Serve(s.pool.listen(s.promLn)) }()
	}
	s.ready.Store(true)
	s.updateHealth()
	return served
}

// notReady makes the health checks fail, for a shutdown.
func (s *servers) notReady() {
	s.ready.Store(false)
	s.hs.Shutdown()
}

// shutdown stops the servers gracefully, waiting up to timeout for the
// calls in flight.
func (s *servers) shutdown(timeout time.Duration, log *slog.Logger) {
	stopped := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(stopped)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, h := range []*http.Server{s.hsrv, s.debugSrv, s.prmSrv} {
		if h != nil {
			if err := h.Shutdown(ctx); err != nil {
				log.Warn("HTTP calls still in flight at the shutdown timeout were cut", "err", err)
			}
		}
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		log.Warn("gRPC calls still in flight at the shutdown timeout were cut")
		s.gs.Stop()
		<-stopped
	}
}

// err returns what run reports of serveErr, a server's error that ended
// serving: nil for a server closed by the shutdown.
func (s *servers) err(serveErr error) error {
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, grpc.ErrServerStopped) {
		return serveErr
	}
	return nil
}

// close closes the listeners.
func (s *servers) close() {
	for _, ln := range []net.Listener{s.grpcLn, s.httpLn, s.debugLn, s.promLn} {
		if ln != nil {
			ln.Close()
		}
	}
}
