package grpclimit_test

import (
	"context"
	"errors"
	"github.com/keyrate/keyrate/middleware"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
)

// TestReportWeightSettles reserves a call's maximum tokens (the request
// names them) and settles what the handler reports it used, for unary
// calls and streams; a call that reports nothing keeps its reservation,
// and a report above it is refused.
func TestReportWeightSettles(t *testing.T) {
	l, _ := manualLimiter(t, 1000, time.Minute)
	g, err := grpclimit.New(l, grpclimit.WithWeight(func(_ context.Context, _ string, req any) int {
		if n, ok := req.(int); ok {
			return n
		}
		return 100 // a stream reserves 100
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	info := &grpc.UnaryServerInfo{FullMethod: "/llm.Model/Generate"}
	left := func() int { return l.Peek("/llm.Model/Generate\x00192.0.2.1").Remaining + 1 }
	for _, c := range []struct{ reserve, used, left int }{
		{400, 120, 880},
		{400, -1, 480}, // reports nothing: the reservation stands
		{300, 0, 480},
	} {
		_, err := g.Unary()(ctx, c.reserve, info, func(ctx context.Context, _ any) (any, error) {
			if c.used >= 0 {
				if err := middleware.ReportWeight(ctx, c.used); err != nil {
					t.Errorf("middleware.ReportWeight(%d): %v", c.used, err)
				}
			}
			if err := middleware.ReportWeight(ctx, c.reserve+1); !errors.Is(err, keyrate.ErrExceedsLimit) {
				t.Errorf("middleware.ReportWeight above the reservation: %v", err)
			}
			return "tokens", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := left(); got != c.left {
			t.Errorf("reserve %d, use %d: %d left, want %d", c.reserve, c.used, got, c.left)
		}
	}
	stream := &grpc.StreamServerInfo{FullMethod: "/llm.Model/Generate", IsServerStream: true}
	err = g.Stream()(nil, fakeStream{ctx: ctx}, stream, func(_ any, ss grpc.ServerStream) error {
		return middleware.ReportWeight(ss.Context(), 30)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := left(); got != 450 {
		t.Errorf("after a stream of 30: %d left, want 450", got)
	}
}

// fakeStream is a server stream that only has a context, as far as the
// interceptor and the handler above need.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context  { return s.ctx }
func (fakeStream) SetHeader(metadata.MD) error { return nil }
