package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// responseHeaders are the headers a response asks Envoy to add to what it
// sends the client (response_headers_to_add).
type responseHeaders struct {
	// limit, remaining and reset name envoyproxy/ratelimit's three headers
	// (LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_LIMIT_HEADER, ...), which
	// describe the descriptor closest to its limit; "" sends none.
	limit, remaining, reset string
	// fields sends the IETF RateLimit-Policy and RateLimit fields, a member
	// for every limit of every descriptor decided (-ratelimit-fields).
	fields bool
}

// Defaults of envoyproxy/ratelimit's header names.
const (
	defaultLimitHeader     = "RateLimit-Limit"
	defaultRemainingHeader = "RateLimit-Remaining"
	defaultResetHeader     = "RateLimit-Reset"
)

// response returns the answer to req, whose items are decided; refused is
// the overall decision. SHADOW_MODE turns a refusal into OK, the statuses
// left as they are, as envoyproxy/ratelimit does.
func (s *service) response(req *rlspb.RateLimitRequest, items []item, refused bool) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items)),
	}
	for i := range items {
		resp.Statuses[i] = items[i].status()
	}
	if refused {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if h := &s.opts.headers; h.limit != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, s.closestHeaders(items, resp.Statuses)...)
	}
	if s.opts.headers.fields {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, fields(items)...)
	}
	if refused && s.opts.shadow {
		resp.OverallCode = rlspb.RateLimitResponse_OK
		s.metrics.globalShadow.Inc()
	}
	if s.opts.dynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, items, resp.Statuses)
	}
	return resp
}

// closestHeaders returns envoyproxy/ratelimit's three headers for the
// descriptor closest to its limit: the last one over it (not counting
// those in quota mode), else the one with the least remaining; none when
// no descriptor has a limit.
func (s *service) closestHeaders(items []item, statuses []*rlspb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var closest *rlspb.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range statuses {
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() < least {
			closest, least = st, st.GetLimitRemaining()
		}
		if st.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT && !(items[i].rule.quota || s.opts.quota) {
			closest, least = st, 0
		}
	}
	if closest == nil {
		return nil
	}
	h := &s.opts.headers
	return []*corev3.HeaderValue{
		{Key: h.limit, Value: strconv.FormatUint(uint64(closest.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: h.remaining, Value: strconv.FormatUint(uint64(closest.GetLimitRemaining()), 10)},
		{Key: h.reset, Value: strconv.FormatInt(closest.GetDurationUntilReset().GetSeconds(), 10)},
	}
}

// fields returns the IETF RateLimit-Policy and RateLimit fields for every
// limit of every descriptor the store decided, named by the limit's name
// or, for an unnamed one, its rule as metrics name it (never a value a
// request sent).
func fields(items []item) []*corev3.HeaderValue {
	var policy, ratelimit []byte
	for i := range items {
		it := &items[i]
		if !it.counts() || len(it.d.Policies()) == 0 {
			continue
		}
		d := withoutKeeper(&it.d)
		if len(policy) > 0 {
			policy = append(policy, ", "...)
			ratelimit = append(ratelimit, ", "...)
		}
		policy = ratelimitfield.AppendPolicy(policy, d, it.rule.stat, "")
		ratelimit = ratelimitfield.AppendRateLimit(ratelimit, d, it.rule.stat)
	}
	if len(policy) == 0 {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: string(policy)},
		{Key: "RateLimit", Value: string(ratelimit)},
	}
}

// withoutKeeper returns d, or d without an override slot's keeper
// policy, which is not a limit anyone set.
func withoutKeeper(d *keyrate.Decision) *keyrate.Decision {
	parts := d.Policies()
	for i := range parts {
		if parts[i].Name == keeperPolicy {
			kept := backend.Combine(slices.Delete(slices.Clone(parts), i, i+1)...)
			return &kept
		}
	}
	return d
}

// status returns the item's descriptor status.
func (it *item) status() *rlspb.RateLimitResponse_DescriptorStatus {
	r := it.rule
	switch {
	case r == nil:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	case r.unlimited:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	code := rlspb.RateLimitResponse_OK
	if it.over && !r.shadow {
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if len(it.d.Policies()) == 0 {
		// Refused without a decision: a limit of 0, or a store that could
		// not describe it. Report the limit that refuses.
		l := &r.limits[0]
		for i := range r.limits {
			if r.limits[i].perUnit == 0 {
				l = &r.limits[i]
				break
			}
		}
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: currentLimit(l, l.perUnit, l.window)}
	}
	d := &it.d
	reset := d.RefillAfter
	if it.over && reset <= 0 {
		// A weight above the limit, on an empty window: it never fits, and
		// no hit of its own is there to leave. The window's length is when
		// a budget spent now would be whole again, never 0 ("now"), which
		// would invite the same request at once.
		reset = d.Window
	}
	return &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       currentLimit(r.limitNamed(d.Policy), d.Limit, d.Window),
		LimitRemaining:     uint32(min(max(d.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: &durationpb.Duration{Seconds: resetSeconds(reset)},
	}
}

// resetSlack is what rounding to whole seconds leaves out: a hit counts
// at the end of its clock tick, some microseconds after the instant it was
// decided at (see keyrate's README), which would otherwise turn an hour
// into 3,601 seconds.
const resetSlack = time.Millisecond

// resetSeconds returns duration_until_reset in whole seconds, rounded up
// (Envoy reads seconds, and a client that waits that long finds quota
// back), less resetSlack; 0 only for no wait at all.
func resetSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(1, ratelimitfield.Seconds(d-resetSlack))
}

// currentLimit describes l, the binding limit of a decision made with
// limit perUnit over window. Those come from the decision, which a reload
// may have made under newer policies than l's; the unit is then worked
// out from the window.
func currentLimit(l *limit, perUnit int, window time.Duration) *rlspb.RateLimitResponse_RateLimit {
	unit, mult := l.unit, l.multiplier
	if window != l.window {
		unit, mult = unitOf(window)
	}
	cl := &rlspb.RateLimitResponse_RateLimit{Name: l.name, RequestsPerUnit: uint32(perUnit), Unit: unit}
	if mult > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return cl
}

// dynamicMetadata returns the response's dynamic metadata as
// envoyproxy/ratelimit fills it (RESPONSE_DYNAMIC_METADATA): the domain,
// each descriptor's entries ("key=value"), limit override and
// hits_addend, the request's hits_addend, and the metadata of the rules
// whose descriptors passed, merged. It goes to Envoy, for its filters and
// access logs; it is the request's own content.
func dynamicMetadata(req *rlspb.RateLimitRequest, items []item, statuses []*rlspb.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range items {
		if r := items[i].rule; r != nil && !r.unlimited && r.metadata != nil && statuses[i].GetCode() != rlspb.RateLimitResponse_OVER_LIMIT {
			mergeStruct(passed, r.metadata)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// descriptorStruct describes one request descriptor for dynamicMetadata.
func descriptorStruct(d *rlv3.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if l := d.GetLimit(); l != nil {
		s := fmt.Sprintf("requests_per_unit:%d unit:%s", l.GetRequestsPerUnit(), l.GetUnit())
		if m := l.GetUnitMultiplier(); m != nil {
			s += fmt.Sprintf(" unit_multiplier:{value:%d}", m.GetValue())
		}
		fields["limit"] = structpb.NewStringValue(s)
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a field both hold as structs is
// merged in turn, any other field dst holds stays as it is.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		old, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = v
		case old.GetStructValue() != nil && v.GetStructValue() != nil:
			// Copy before merging: dst must not change the rule's own.
			cp := &structpb.Struct{Fields: map[string]*structpb.Value{}}
			mergeStruct(cp, old.GetStructValue())
			mergeStruct(cp, v.GetStructValue())
			dst.Fields[k] = structpb.NewStructValue(cp)
		}
	}
}
