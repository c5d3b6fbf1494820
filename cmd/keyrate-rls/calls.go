package main

import (
	"container/list"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// callGate bounds what gRPC calls hold, in two stages. A call whose
// request is still being read (from its headers to its complete request
// message) is reading: at most maxReading at once, each for at most
// readTimeout, each holding at most a message's bytes (maxMessage), which
// gRPC lets its client send once the message's length has come. Past
// maxReading, a new call ends the one reading for longest, which an honest
// client, whose request comes with its headers, never is. A call whose
// request has come is in flight, at most maxInFlight at once: past it a
// call is refused with UNAVAILABLE. So calls that never finish sending
// their request neither hold an in-flight place nor outlast readTimeout,
// and others are served all the while.
type callGate struct {
	readTimeout time.Duration
	maxReading  int
	maxInFlight int64
	// requested, when set, learns of the connection (its two ends) of
	// each call whose request has come (see connPool.requested).
	requested func(local, remote net.Addr)

	inFlight atomic.Int64
	mu       sync.Mutex
	reading  list.List // of *pendingCall, oldest first; under mu
}

// Why a call ended while its request was still being read.
var (
	errReadTimeout = errors.New("the request did not come within -request-read-timeout")
	errDisplaced   = errors.New("more calls than -max-reading were reading their request: this one, the oldest, gave way")
)

// Reading returns the calls whose request is being read.
func (g *callGate) Reading() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reading.Len()
}

// InFlight returns the calls in flight.
func (g *callGate) InFlight() int { return int(g.inFlight.Load()) }

// pendingCall is a call whose request is being read.
type pendingCall struct {
	gate   *callGate
	cancel context.CancelCauseFunc
	timer  *time.Timer
	elem   *list.Element // under gate.mu; nil once read or ended
}

type pendingKey struct{}

// tap is the server's InTapHandle: it runs on a call's headers, before
// any of its message, and makes the call reading.
func (g *callGate) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &pendingCall{gate: g, cancel: cancel}
	g.mu.Lock()
	var displaced *pendingCall
	if g.reading.Len() >= g.maxReading {
		displaced = g.reading.Remove(g.reading.Front()).(*pendingCall)
		displaced.elem = nil
	}
	p.elem = g.reading.PushBack(p)
	p.timer = time.AfterFunc(g.readTimeout, func() {
		if p.done() {
			cancel(errReadTimeout)
		}
	})
	g.mu.Unlock()
	if displaced != nil {
		displaced.timer.Stop()
		displaced.cancel(errDisplaced)
	}
	// However the call ends, it is no longer reading.
	context.AfterFunc(ctx, func() { p.done() })
	return context.WithValue(ctx, pendingKey{}, p), nil
}

// done takes p out of the reading calls, and reports whether it was
// still there (neither read, ended, timed out nor displaced).
func (p *pendingCall) done() bool {
	g := p.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.elem == nil {
		return false
	}
	g.reading.Remove(p.elem)
	p.elem = nil
	return true
}

// read ends the reading of ctx's call, whose request has come, and takes
// an in-flight place for it; release gives the place back. It fails when
// the call timed out or gave way meanwhile, or when every place is held.
func (g *callGate) read(ctx context.Context) (release func(), err error) {
	if p, ok := ctx.Value(pendingKey{}).(*pendingCall); ok {
		p.timer.Stop()
		if !p.done() {
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errReadTimeout):
				return nil, status.Error(codes.DeadlineExceeded, cause.Error())
			case errors.Is(cause, errDisplaced):
				return nil, status.Error(codes.Unavailable, cause.Error())
			case cause != nil:
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
	}
	if pr, ok := peer.FromContext(ctx); ok && g.requested != nil {
		g.requested(pr.LocalAddr, pr.Addr)
	}
	if g.inFlight.Add(1) > g.maxInFlight {
		g.inFlight.Add(-1)
		return nil, status.Error(codes.Unavailable, "too many calls in flight")
	}
	return func() { g.inFlight.Add(-1) }, nil
}

// unary is the first unary interceptor: gRPC calls it once the request
// has been read whole.
func (g *callGate) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	release, err := g.read(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return h(ctx, req)
}

// stream is the stream interceptor: a streaming call (the health service's
// Watch, reflection) is reading until its first message has come.
func (g *callGate) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	w := &gatedStream{ServerStream: ss, gate: g}
	defer func() {
		if w.release != nil {
			w.release()
		}
	}()
	return h(srv, w)
}

// gatedStream takes its call's in-flight place on its first message.
type gatedStream struct {
	grpc.ServerStream
	gate    *callGate
	release func() // nil until the first message
}

func (s *gatedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.release == nil {
		release, err := s.gate.read(s.Context())
		if err != nil {
			return err
		}
		s.release = release
	}
	return nil
}
