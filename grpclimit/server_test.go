package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
)

// The methods of the health service, the service every test serves: it has a
// unary method and a server stream, and needs no generated code of ours.
const (
	check = "/grpc.health.v1.Health/Check"
	watch = "/grpc.health.v1.Health/Watch"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// testServer is a real grpc.Server on a loopback port, serving the health
// service behind a Limiter's interceptors.
type testServer struct {
	addr   string
	health *health.Server
	served atomic.Int64 // calls and streams that got past the Limiter
	stop   func()       // stops the server once its calls have returned
}

func serve(t *testing.T, lim *grpclimit.Limiter) *testServer {
	t.Helper()
	ts := &testServer{health: health.NewServer()}
	count := func() { ts.served.Add(1) }
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.Unary(),
			func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				count()
				return h(ctx, req)
			}),
		grpc.ChainStreamInterceptor(lim.Stream(),
			func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				count()
				return h(srv, ss)
			}),
	)
	healthpb.RegisterHealthServer(srv, ts.health)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	ts.stop = srv.GracefulStop
	t.Cleanup(srv.Stop)
	return ts
}

// client dials the server from the loopback address from (127.0.0.x), so
// that tests can play distinct clients, and returns once connected: a
// call's deadline then covers the call alone, not the dial as well, which
// a loaded machine can take longer than a short deadline to finish.
func (ts *testServer) client(t *testing.T, from string) healthpb.HealthClient {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := grpc.NewClient("passthrough:///"+ts.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("connecting to the test server: still %v", s)
		}
	}
	return healthpb.NewHealthClient(conn)
}

// callResult is what a client sees of one unary call.
type callResult struct {
	code   codes.Code
	header metadata.MD
	retry  *errdetails.RetryInfo // nil when the status has none
	msg    string
}

func callCheck(t *testing.T, c healthpb.HealthClient, md ...string) callResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var res callResult
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&res.header))
	res.code, res.retry, res.msg = inspect(err)
	return res
}

func inspect(err error) (codes.Code, *errdetails.RetryInfo, string) {
	st := status.Convert(err)
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	return st.Code(), retry, st.Message()
}

func manualLimiter(t *testing.T, limit int, window time.Duration) (*keyrate.Limiter, *keyrate.ManualClock) {
	t.Helper()
	clock := keyrate.NewManualClock(t0)
	l, err := keyrate.New(limit, window, keyrate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, clock
}

func mustNew(t *testing.T, b keyrate.Backend, opts ...grpclimit.Option) *grpclimit.Limiter {
	t.Helper()
	lim, err := grpclimit.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
