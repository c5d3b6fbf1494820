package grpclimit

import (
	"context"

	"google.golang.org/grpc"
)

// Unary returns the interceptor that limits unary calls. It decides each
// call before its handler runs and sets the ratelimit header metadata; a
// refused call never reaches the handler.
func (l *Limiter) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, served, after, release, err := l.decide(ctx, info.FullMethod, req)
		defer release() // when the handler returns or panics
		if md != nil {
			// It fails only outside a server, where there is no one to tell.
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		resp, err := handler(served, req)
		if after != nil {
			after(err)
		}
		return resp, err
	}
}

// Stream returns the interceptor that limits streams. A stream is decided
// once, when it opens, with a request of nil for WithWeight: the messages it
// then carries are not counted. A refused stream never reaches the handler.
func (l *Limiter) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, served, after, release, err := l.decide(ss.Context(), info.FullMethod, nil)
		defer release() // when the stream ends
		if md != nil {
			_ = ss.SetHeader(md) // fails only once headers were sent, which no handler has done yet
		}
		if err != nil {
			return err
		}
		if served != ss.Context() {
			ss = &servedStream{ServerStream: ss, ctx: served}
		}
		err = handler(srv, ss)
		if after != nil {
			after(err)
		}
		return err
	}
}

// servedStream is a stream served under a context of its own: one that
// carries the call's reservation (see middleware.ReportWeight).
type servedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *servedStream) Context() context.Context { return s.ctx }
