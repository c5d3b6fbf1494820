package grpclimit

import (
	"context"
	"github.com/keyrate/keyrate/middleware/adapter"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// noSlot is the release of a call that holds no slot.
func noSlot() {}

// holdSlot takes the slot of the call ev describes, made by the client
// sent names, on route r. It returns the slot's release and the
// ratelimit-policy member of the in-flight limit; or, when the call must
// not go on to the rate decision, the metadata to send and the error to
// fail it with (nil to serve it, in shadow mode).
func (l *Limiter) holdSlot(ctx context.Context, r *route, ev middleware.Event, sent string) (release func(), member string, stop bool, md metadata.MD, err error) {
	hold := l.slots.Hold(ctx, &ev, sent)
	switch {
	case hold.Err != nil:
		md, err := l.failed(ctx, r, ev)
		return noSlot, "", true, md, err
	case hold.Policy.Name == "": // on without a slot
		return hold.Release, "", false, nil, nil
	}
	member = string(ratelimitfield.AppendPolicies(nil, []keyrate.Policy{hold.Policy}, r.method, adapter.SlotUnit))
	if !hold.Full {
		return hold.Release, member, false, nil, nil
	}
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
// ResourceExhausted, with a RetryInfo of adapter.SlotRetryAfter.
func slotRefusal(method string) error {
	st := status.Newf(codes.ResourceExhausted, "keyrate: in-flight limit of %s reached; retry in %v", method, adapter.SlotRetryAfter)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(adapter.SlotRetryAfter)}); err == nil {
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
