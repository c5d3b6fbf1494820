package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
	"github.com/keyrate/keyrate/middleware"
)

func newConcurrency(t *testing.T, limit int, tier func(string) string, tiers map[string]int) *keyrate.Concurrency {
	t.Helper()
	c, err := keyrate.NewConcurrency(limit, tier, tiers)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// gate holds the unary calls that carry the metadata "hold" inside the
// handler until it is opened, and says when one is inside.
type gate struct {
	inside chan struct{}
	open   chan struct{}
}

func newGate() *gate { return &gate{inside: make(chan struct{}, 100), open: make(chan struct{})} }

func (g *gate) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "hold")) > 0 {
		g.inside <- struct{}{}
		<-g.open
	}
	return h(ctx, req)
}

// serveGated serves the health service behind lim, with g inside it.
func serveGated(t *testing.T, lim *grpclimit.Limiter, g *gate) *testServer {
	t.Helper()
	ts := &testServer{}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.Unary(), g.unary),
		grpc.ChainStreamInterceptor(lim.Stream()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ts.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ts
}

// A method holding 1 call in flight per client: a second call while the
// first runs fails at once with ResourceExhausted and a RetryInfo of a
// second, lists the in-flight policy beside the rate one, and spends no
// rate budget; once the first ends, the next is served.
func TestConcurrencyUnary(t *testing.T) {
	l, _ := manualLimiter(t, 10, time.Minute)
	c := newConcurrency(t, 1, nil, nil)
	var limited []middleware.Event
	g := newGate()
	ts := serveGated(t, mustNew(t, l, grpclimit.WithConcurrency(c, 0),
		grpclimit.WithOnLimited(func(e middleware.Event) { limited = append(limited, e) })), g)
	alice := ts.client(t, "127.0.0.1")

	held := make(chan callResult)
	go func() { held <- callCheck(t, alice, "hold", "1") }()
	<-g.inside
	res := callCheck(t, alice)
	assert.Equal(t, codes.ResourceExhausted, res.code, res.msg)
	require.NotNil(t, res.retry)
	assert.Equal(t, time.Second, res.retry.GetRetryDelay().AsDuration())
	assert.Equal(t, []string{`"` + check + `-inflight";q=1;qu="concurrent-requests"`, `"` + check + `";q=10;w=60`},
		res.header.Get("ratelimit-policy"))
	assert.Empty(t, res.header.Get("ratelimit"), "no rate decision was made")
	require.Len(t, limited, 1)
	assert.Equal(t, check+"-inflight", limited[0].Decision.Policy)
	assert.Equal(t, 9, l.Peek(check+"\x00127.0.0.1").Remaining+1, "the refusal spent no rate budget")

	close(g.open)
	assert.Equal(t, codes.OK, (<-held).code)
	res = callCheck(t, alice)
	assert.Equal(t, codes.OK, res.code, res.msg)
	assert.Equal(t, []string{`"` + check + `-inflight";q=1;qu="concurrent-requests"`, `"` + check + `";q=10;w=60`},
		res.header.Get("ratelimit-policy"))
	assert.Equal(t, `"`+check+`";r=8;t=60`, first(res.header, "ratelimit"))
	assert.Equal(t, 0, c.Len(), "every slot is back")
}

// A stream holds its slot until it ends.
func TestConcurrencyStream(t *testing.T) {
	l, _ := manualLimiter(t, 10, time.Minute)
	c := newConcurrency(t, 1, nil, nil)
	ts := serve(t, mustNew(t, l, grpclimit.WithConcurrency(c, 0)))
	alice := ts.client(t, "127.0.0.1")

	ctx, cancel := context.WithCancel(context.Background())
	stream, err := alice.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv() // the stream is open, and holds its slot
	require.NoError(t, err)

	second, err := alice.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = second.Recv()
	code, retry, _ := inspect(err)
	assert.Equal(t, codes.ResourceExhausted, code)
	assert.NotNil(t, retry)

	cancel()
	require.Eventually(t, func() bool { return c.Len() == 0 }, 10*time.Second, time.Millisecond,
		"the ended stream gave its slot back")
	third, err := alice.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = third.Recv()
	assert.NoError(t, err)
}

// The slot goes back when the handler panics (a recovering interceptor
// outside would answer the call).
func TestConcurrencyReleasedOnPanic(t *testing.T) {
	l, _ := manualLimiter(t, 10, time.Minute)
	c := newConcurrency(t, 1, nil, nil)
	unary := mustNew(t, l, grpclimit.WithConcurrency(c, 0)).Unary()
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	info := &grpc.UnaryServerInfo{FullMethod: check}
	for range 3 {
		assert.PanicsWithValue(t, "handler failed", func() {
			unary(ctx, nil, info, func(context.Context, any) (any, error) { panic("handler failed") })
		})
	}
	assert.Equal(t, 0, c.Len())
}

// A call whose client goes while it waits for a slot is never served,
// and fails with its own status.
func TestConcurrencyClientGoneWhileWaiting(t *testing.T) {
	l, _ := manualLimiter(t, 10, time.Minute)
	c := newConcurrency(t, 1, nil, nil)
	errs := make(chan error, 1)
	ts := serve(t, mustNew(t, l, grpclimit.WithConcurrency(c, time.Hour),
		grpclimit.WithOnError(func(e middleware.Event) { errs <- e.Err })))
	alice := ts.client(t, "127.0.0.1")
	hold, ok, _ := c.TryAcquire(context.Background(), check+"\x00127.0.0.1")
	require.True(t, ok)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := alice.Check(ctx, &healthpb.HealthCheckRequest{})
	code, _, _ := inspect(err)
	assert.Equal(t, codes.DeadlineExceeded, code)
	assert.ErrorIs(t, <-errs, middleware.ErrClientGone)
	assert.Zero(t, ts.served.Load(), "the call never reached the handler")
	hold()
	assert.Equal(t, 0, c.Len(), "and took no slot")
	assert.Equal(t, 10, l.Peek(check+"\x00127.0.0.1").Remaining+1, "nor any rate budget")
}

// failingSlots is an in-flight store that cannot answer.
type failingSlots struct{}

func (failingSlots) Tiered() bool { return false }

func (failingSlots) AcquireSlot(context.Context, string, bool) (func(), int, error) {
	return nil, 0, fmt.Errorf("slots: %w", keyrate.ErrUnavailable)
}

func TestConcurrencyStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		mode middleware.FailureMode
		code codes.Code
	}{
		{middleware.FailOpen, codes.OK},
		{middleware.FailClosed, codes.Unavailable},
	} {
		t.Run(fmt.Sprint(tc.mode), func(t *testing.T) {
			l, _ := manualLimiter(t, 5, time.Minute)
			var errs []error
			ts := serve(t, mustNew(t, l, grpclimit.WithConcurrency(failingSlots{}, 0), grpclimit.WithFailureMode(tc.mode),
				grpclimit.WithOnError(func(e middleware.Event) { errs = append(errs, e.Err) })))
			res := callCheck(t, ts.client(t, "127.0.0.1"))
			assert.Equal(t, tc.code, res.code, res.msg)
			require.Len(t, errs, 1)
			assert.ErrorIs(t, errs[0], keyrate.ErrUnavailable)
			if tc.code == codes.OK {
				assert.Equal(t, `"`+check+`";r=4;t=60`, first(res.header, "ratelimit"), "the rate limit still applies")
			}
		})
	}
}

func TestConcurrencyOptionErrors(t *testing.T) {
	l, _ := manualLimiter(t, 1, time.Minute)
	_, err := grpclimit.New(l, grpclimit.WithConcurrency(nil, 0))
	assert.ErrorIs(t, err, keyrate.ErrConfig)
	_, err = grpclimit.New(l, grpclimit.WithConcurrency(newConcurrency(t, 1, nil, nil), -time.Second))
	assert.ErrorIs(t, err, keyrate.ErrConfig)
}
