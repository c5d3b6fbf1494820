package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
	kbackend "github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/grpclimit"
)

// TestRefundCountsOnlyFailures: 2 failed calls a minute, successful ones
// refunded. Successes leave the budget whole; after 2 failures every call
// is refused until the first failure leaves the window.
func TestRefundCountsOnlyFailures(t *testing.T) {
	l, clock := manualLimiter(t, 2, time.Minute)
	g, err := grpclimit.New(l, grpclimit.WithRefund(func(c codes.Code) bool { return c == codes.OK }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	info := &grpc.UnaryServerInfo{FullMethod: "/auth.Auth/Login"}
	call := func(ok bool) codes.Code {
		_, err := g.Unary()(ctx, nil, info, func(context.Context, any) (any, error) {
			if ok {
				return "welcome", nil
			}
			return nil, status.Error(codes.Unauthenticated, "wrong password")
		})
		return status.Code(err)
	}
	for i := range 10 {
		if got := call(true); got != codes.OK {
			t.Fatalf("success %d: %v", i, got)
		}
	}
	for i := range 2 {
		if got := call(false); got != codes.Unauthenticated {
			t.Fatalf("failure %d: %v, want Unauthenticated: successes should have been refunded", i, got)
		}
	}
	if got := call(true); got != codes.ResourceExhausted {
		t.Fatalf("after 2 failures: %v, want ResourceExhausted", got)
	}
	clock.Advance(time.Minute)
	if got := call(true); got != codes.OK {
		t.Fatalf("after the window: %v", got)
	}

	only := kbackend.Func(l.TakeContext)
	if _, err := grpclimit.New(only, grpclimit.WithRefund(func(codes.Code) bool { return true })); !errors.Is(err, keyrate.ErrConfig) {
		t.Fatalf("a backend without Refund: %v, want ErrConfig", err)
	}
}
