package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/keyrate/keyrate"
	kbackend "github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/grpclimit"
	"github.com/keyrate/keyrate/middleware"
)

// In shadow mode nothing is refused, errors included, as in httplimit: the
// Limiter limits no one yet, so serving a call it cannot place lifts no
// limit. Errors still reach OnError and the Observer, with Shadow set
// where enforcement would have failed the call (InvalidArgument for a call
// that cannot be placed, Unavailable under FailClosed).
func TestShadowServesErrors(t *testing.T) {
	invalid := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{}, fmt.Errorf("%w: refused", keyrate.ErrInvalidKey)
	})
	down := backendFunc(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		return keyrate.Decision{}, errors.New("store down")
	})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}})
	info := &grpc.UnaryServerInfo{FullMethod: check}
	for _, c := range []struct {
		name   string
		b      keyrate.Backend
		mode   middleware.FailureMode
		shadow bool
	}{
		{"call that cannot be placed", invalid, middleware.FailOpen, true},
		{"store unavailable, fail-closed", down, middleware.FailClosed, true},
		{"store unavailable, fail-open", down, middleware.FailOpen, false},
	} {
		var errs, observed []middleware.Event
		unary := mustNew(t, c.b, grpclimit.WithShadow(), grpclimit.WithFailureMode(c.mode),
			grpclimit.WithOnError(func(ev middleware.Event) { errs = append(errs, ev) }),
			grpclimit.WithObserver(observerFunc(func(ev middleware.Event) { observed = append(observed, ev) }))).Unary()
		served := 0
		res, err := unary(ctx, nil, info, func(context.Context, any) (any, error) { served++; return "ok", nil })
		if err != nil || res != "ok" || served != 1 {
			t.Errorf("%s: %v, %v, handler ran %d times; want the handler's answer", c.name, res, err, served)
		}
		for who, evs := range map[string][]middleware.Event{"OnError": errs, "the Observer": observed} {
			if len(evs) != 1 || evs[0].Err == nil || evs[0].Shadow != c.shadow {
				t.Errorf("%s: %s heard of %d events (the first: %v), want one error with Shadow %v", c.name, who, len(evs), describe(evs), c.shadow)
			}
		}
	}
}

// describe describes the first of evs by its error and shadow mark.
func describe(evs []middleware.Event) string {
	if len(evs) == 0 {
		return "none"
	}
	return fmt.Sprintf("Err %v, Shadow %v", evs[0].Err, evs[0].Shadow)
}

type observerFunc func(middleware.Event)

func (f observerFunc) Observe(ev middleware.Event) { f(ev) }

// WithTimeBudget bounds the backends that are not Bounded. When every
// backend bounds itself, the in-process limiter included (it never
// waits), a budget would bound nothing, so New refuses it rather than let
// it look like it applies; with one backend it would bound, it is taken.
func TestTimeBudgetOnlyWhereTheLimiterEnforcesIt(t *testing.T) {
	l, _ := manualLimiter(t, 1, time.Minute)
	other, _ := manualLimiter(t, 1, time.Minute)
	unbounded := kbackend.Func(l.TakeContext)
	budget := grpclimit.WithTimeBudget(100 * time.Millisecond)
	for name, c := range map[string]struct {
		opts []grpclimit.Option
		ok   bool
		b    keyrate.Backend
	}{
		"the in-process limiter":              {[]grpclimit.Option{budget}, false, l},
		"Bounded backends only":               {[]grpclimit.Option{budget, grpclimit.WithMethod(watch, other)}, false, l},
		"a Bounded one, without a budget":     {nil, true, l},
		"a backend that is not Bounded":       {[]grpclimit.Option{budget}, true, unbounded},
		"one of its backends is not Bounded":  {[]grpclimit.Option{budget, grpclimit.WithMethod(watch, unbounded)}, true, l},
		"New's is not Bounded, a method's is": {[]grpclimit.Option{budget, grpclimit.WithMethod(watch, other)}, true, unbounded},
	} {
		_, err := grpclimit.New(c.b, c.opts...)
		if c.ok && err != nil || !c.ok && !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("%s: %v, want ok %v or keyrate.ErrConfig", name, err, c.ok)
		}
	}
}
