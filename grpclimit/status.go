package grpclimit

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
)

// refusal is the error of a refused call. When waiting helps, it is
// ResourceExhausted with a RetryInfo whose delay is the exact RetryAfter, so
// that a client retrying then is admitted. A call that can never fit (its
// weight is negative or above the limit) is InvalidArgument instead: gRPC
// clients retry ResourceExhausted, and retrying it would never succeed.
func refusal(method string, d keyrate.Decision) error {
	if d.RetryAfter <= 0 {
		return status.Errorf(codes.InvalidArgument, "keyrate: the call's weight can never fit the rate limit of %s", method)
	}
	st := status.Newf(codes.ResourceExhausted, "keyrate: rate limit of %s exceeded; retry in %v", method, d.RetryAfter)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
		st = withInfo // err is never set: RetryInfo always marshals
	}
	return st.Err()
}

// failed answers a call for which no decision could be had, and reports
// ev, whose Err says why. A call whose client has gone fails with its
// context's status, in every mode. A client-caused error fails it with
// InvalidArgument in either failure mode, and FailClosed fails a store
// failure with Unavailable; but shadow mode refuses neither, and marks
// ev.Shadow instead. Any other call is served, with the policy alone when
// known. The error's text is not sent: it may name the key.
func (l *Limiter) failed(ctx context.Context, r *route, ev middleware.Event) (metadata.MD, error) {
	var refusal error
	switch {
	case errors.Is(ev.Err, middleware.ErrClientGone):
		l.hooks.Failed(ev)
		return nil, status.FromContextError(ctx.Err()).Err()
	case errors.Is(ev.Err, keyrate.ErrInvalidKey):
		refusal = status.Error(codes.InvalidArgument, "keyrate: the call cannot be rate-limited: its client identity is not a valid key")
	case l.failure == middleware.FailClosed:
		refusal = status.Error(codes.Unavailable, "keyrate: the rate limiter is unavailable; try again shortly")
	}
	if refusal != nil && l.shadow {
		ev.Shadow, refusal = true, nil
	}
	l.hooks.Failed(ev)
	if refusal != nil {
		return nil, refusal
	}
	if p := r.defaultPolicy(); p != "" {
		return metadata.MD{mdPolicy: {p}}, nil
	}
	return nil, nil
}
