package grpclimit

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// WithInFlight holds every method to a number of calls per client in
// flight at once, beside its rate policies, as httplimit.WithInFlight
// holds a route: a call takes one of its key's slots in s (a
// *keyrate.Concurrency, or the Redis backend's Concurrency, shared by
// replicas) before anything else, and gives it back when its handler
// returns, whether it returns normally, panics, or ends because the client
// cancelled; a stream holds its slot until it ends. The key is the rate
// limit's (the full method and the identity), so each method has slots of
// its own, and a store's tier function sees the identity.
//
// When the key holds its limit, the call waits up to wait for a slot (0,
// the default: not at all), within its own context, first come first
// served; then it fails with ResourceExhausted and a RetryInfo of a second
// (middleware.SlotRetryAfter: nothing knows when a call in flight will
// end), without asking the rate backend, so that the refusal costs the
// client no rate budget. A call whose client goes while it waits is never
// served, and fails with its own context's status.
//
// ratelimit-policy lists the in-flight limit beside the rate policies, as
// a policy named method + "-inflight", with the key's number of slots and
// the draft's unit, with no window:
//
//	ratelimit-policy: "/pkg.Service/Method-inflight";q=3;qu="concurrent-requests"
//
// The hooks, the Observer, the failure mode and shadow mode treat it as
// httplimit does: one Event per call, a refusal for want of a slot being
// one whose Decision names the in-flight policy (middleware.SlotRefusal);
// a store that cannot answer goes to OnError, then FailOpen goes on
// without a slot and FailClosed fails the call with Unavailable; shadow
// mode holds no call up, and serves one for a full key without a slot and
// without a rate decision. A nil s or a negative wait make New return an
// error wrapping keyrate.ErrConfig. Default: no in-flight limit.
func WithInFlight(s middleware.InFlight, wait time.Duration) Option {
	return func(c *config) { c.inFlight, c.inFlightWait, c.inFlightSet = s, wait, true }
}

// newSlots returns the Slots of WithInFlight, or nil without it.
func newSlots(c *config) (*middleware.Slots, error) {
	if !c.inFlightSet {
		return nil, nil
	}
	return middleware.NewSlots(c.inFlight, c.inFlightWait)
}

// noSlot is the release of a call that holds no slot.
func noSlot() {}

// holdSlot takes the slot of the call ev describes, made by the client
// sent names, on route r. It returns the slot's release and the
// ratelimit-policy member of the in-flight limit; or, when the call must
// not go on to the rate decision, the metadata to send and the error to
// fail it with (nil to serve it, in shadow mode).
func (l *Limiter) holdSlot(ctx context.Context, r *route, ev middleware.Event, sent string) (release func(), member string, stop bool, md metadata.MD, err error) {
	var began time.Time
	if l.timed {
		began = time.Now()
	}
	release, limit, err := l.slots.Acquire(ctx, ev.Key, sent, l.shadow)
	if l.timed {
		ev.Duration = time.Since(began)
	}
	if err != nil {
		ev.Err = err
		failOpen := !errors.Is(err, middleware.ErrClientGone) && !errors.Is(err, keyrate.ErrInvalidKey) &&
			(l.failure == middleware.FailOpen || l.shadow)
		if !failOpen {
			md, err := l.failed(ctx, r, ev)
			return noSlot, "", true, md, err
		}
		ev.Shadow = l.shadow && l.failure == middleware.FailClosed
		report(l.onError, ev)
		l.observe(ev)
		return noSlot, "", false, nil, nil
	}
	p := middleware.SlotPolicy(r.method, limit)
	member = string(ratelimitfield.AppendPolicies(nil, []keyrate.Policy{p}, r.method, middleware.SlotUnit))
	if release != nil {
		return release, member, false, nil, nil
	}
	ev.Decision = middleware.SlotRefusal(r.method, limit)
	ev.Shadow = l.shadow
	report(l.onDecision, ev)
	report(l.onLimited, ev)
	l.observe(ev)
	md = metadata.MD{mdPolicy: {member}}
	if dp := r.defaultPolicy(); dp != "" {
		md[mdPolicy] = append(md[mdPolicy], dp)
	}
	if l.shadow {
		return noSlot, "", true, md, nil
	}
	return noSlot, "", true, md, slotRefusal(r.method)
}

// slotRefusal is the error of a call refused for want of a slot:
// ResourceExhausted, with a RetryInfo of middleware.SlotRetryAfter.
func slotRefusal(method string) error {
	st := status.Newf(codes.ResourceExhausted, "keyrate: in-flight limit of %s reached; retry in %v", method, middleware.SlotRetryAfter)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(middleware.SlotRetryAfter)}); err == nil {
		st = withInfo // err is never set: RetryInfo always marshals
	}
	return st.Err()
}

// withSlot adds the in-flight limit's member, when there is one, to the
// ratelimit-policy of md, before the rate policies.
func withSlot(md metadata.MD, member string) metadata.MD {
	if member == "" {
		return md
	}
	if md == nil {
		md = metadata.MD{}
	}
	md[mdPolicy] = append([]string{member}, md[mdPolicy]...)
	return md
}
