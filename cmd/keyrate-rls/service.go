package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keyrate/keyrate"
)

// service answers Envoy's ShouldRateLimit from the rules it has loaded and
// the budgets in its store.
type service struct {
	rlspb.UnimplementedRateLimitServiceServer

	store     store
	metrics   *metrics
	log       *slog.Logger
	rules     atomic.Pointer[ruleSet]
	overrides overrides

	mu      sync.Mutex                  // serialises load
	tiers   map[string]string           // rule path -> tier name; a path keeps its tier for good
	applied map[string][]keyrate.Policy // tier name -> the policies last set on it
}

// newService returns a service over st that has loaded rs.
func newService(st store, m *metrics, log *slog.Logger, rs *ruleSet) (*service, error) {
	s := &service{
		store:   st,
		metrics: m,
		log:     log,
		tiers:   map[string]string{},
		applied: map[string][]keyrate.Policy{},
	}
	s.overrides.store = st
	s.overrides.log = log
	if err := s.load(rs); err != nil {
		return nil, err
	}
	return s, nil
}

// load makes rs the rules requests are decided by. Each rule gets a tier
// named after its path (see ruleTier), the same as that of a rule of the
// same path in an earlier load, so that its budgets keep their counts; a
// rule whose limits changed has its tier's policies replaced first, so
// that no request is decided under rs before its tiers exist.
func (s *service) load(rs *ruleSet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs.rules {
		t, ok := s.tiers[r.path]
		if !ok {
			t = ruleTier(r.path)
			s.tiers[r.path] = t
		}
		r.tier = t
		if r.unlimited || r.blocked {
			continue
		}
		ps := r.policies()
		if slices.Equal(s.applied[t], ps) {
			continue
		}
		if err := s.store.SetTier(t, ps); err != nil {
			return fmt.Errorf("rule at line %d: %w", r.line, err)
		}
		s.applied[t] = ps
	}
	s.rules.Store(rs)
	return nil
}

// ruleTier returns the tier of the rule at path: "r" and the first 12
// bytes of the path's SHA-256 in base64url. A rule's budgets are named by
// it in every replica, whatever rules each loaded before, so that replicas
// sharing budgets in Redis agree on them, and one restarted on a newer file
// finds them again; a name given in the order of loading would not.
func ruleTier(path string) string {
	sum := sha256.Sum256([]byte(path))
	return "r" + base64.RawURLEncoding.EncodeToString(sum[:12])
}

// maxDescriptors bounds the descriptors of one request. Envoy sends one per
// rate limit action of a route, a handful.
const maxDescriptors = 64

// maxWeight is a weight no limit admits: a hits_addend above math.MaxInt32
// becomes it, and is refused.
const maxWeight = math.MaxInt32 + 1

// item is one descriptor of a request, as it is decided.
type item struct {
	rule   *rule // nil: no rule applies
	key    string
	weight int
	d      keyrate.Decision
	// over reports that the descriptor's own limits refuse the request;
	// recorded, that the request was recorded against its budget.
	over, recorded bool
}

// counts reports whether a rule limits the descriptor: a budget decides
// it, or a limit of 0 refuses it.
func (it *item) counts() bool { return it.rule != nil && !it.rule.unlimited }

// ShouldRateLimit decides a request: every descriptor under a rule counts
// it against that rule's budget, all or nothing (one refusal records
// nothing against the others), and the overall code is OVER_LIMIT when a
// descriptor not in shadow mode is over its limit. Statuses come in the
// order of the descriptors.
func (s *service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "the rate limit domain is empty")
	case len(descs) == 0:
		return nil, status.Error(codes.InvalidArgument, "the request has no descriptors")
	case len(descs) > maxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "the request has %d descriptors, want at most %d", len(descs), maxDescriptors)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	rs := s.rules.Load()
	domain := req.GetDomain()
	items := make([]item, len(descs))
	var replaced []string
	for i, desc := range descs {
		it := &items[i]
		if desc.GetLimit() != nil {
			it.rule, it.key = s.overrides.match(domain, desc)
		} else {
			it.rule, it.key = rs.match(domain, desc.GetEntries())
		}
		it.weight = weightOf(req, desc)
		if it.rule != nil {
			replaced = append(replaced, it.rule.replaces...)
		}
	}
	for i := range items {
		if r := items[i].rule; r != nil && !r.unlimited && slices.ContainsFunc(replaced, r.named) {
			items[i].rule = nil // another matched rule replaces it
		}
	}

	label := domain
	if rs.domains[domain] == nil {
		label = otherDomain
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	if err := s.decide(ctx, domain, label, items); err != nil {
		return nil, err
	}
	resp.Statuses = make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items))
	for i := range items {
		it := &items[i]
		resp.Statuses[i] = it.status()
		if it.over && !it.rule.shadow {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		// The domain and the codes only: descriptor values may be credentials.
		s.log.Debug("decided", "domain", label, "descriptors", len(items), "code", resp.OverallCode.String())
	}
	return resp, nil
}

// weightOf returns what a descriptor counts for: its own hits_addend when
// it has one (0 checks without counting), else the request's, where 0
// means 1 (Envoy sends 0 when none is set). A refund (is_negative_hits)
// is not supported: such a descriptor is checked, not counted.
func weightOf(req *rlspb.RateLimitRequest, desc *rlv3.RateLimitDescriptor) int {
	if desc.GetIsNegativeHits() {
		return 0
	}
	if h := desc.GetHitsAddend(); h != nil {
		return int(min(h.GetValue(), maxWeight))
	}
	return max(1, int(req.GetHitsAddend()))
}

// decide fills in the decisions of the items that count, for a request
// of domain; label is the domain as metrics and logs name it.
//
// One store call decides them all, as one request, when they share one
// weight: the common case. A descriptor in shadow mode is decided with the
// others, as if enforced; when only shadow descriptors refuse, the request
// goes through after all, and a second call records it against the
// enforced descriptors alone. A request refused before the store is asked
// (a limit of 0) or that counts nothing (a weight of 0) is checked with a
// call that records nothing.
func (s *service) decide(ctx context.Context, domain, label string, items []item) error {
	var (
		keys     []string
		at       []int // the item of each key
		weight   = -1
		mixed    bool
		blocked  bool // an enforced limit of 0 refuses the request
		enforced []int
	)
	for i := range items {
		it := &items[i]
		if !it.counts() {
			continue
		}
		if it.rule.blocked {
			it.over = true
			blocked = blocked || !it.rule.shadow
			continue
		}
		if weight >= 0 && it.weight != weight {
			mixed = true
		}
		weight = it.weight
		keys = append(keys, it.key)
		at = append(at, i)
		if !it.rule.shadow {
			enforced = append(enforced, i)
		}
	}
	if len(keys) == 0 {
		s.observe(label, items, 0, false)
		return nil
	}
	failed := func(err error, start time.Time) error { return s.failed(ctx, label, err, start) }
	if mixed {
		// Budgets of different weights cannot be decided as one request
		// by the store; refusing is the answer that never admits too much.
		s.log.Warn("refused a request whose descriptors carry different hits_addend values: keyrate-rls decides a request's descriptors at one weight",
			"domain", label)
		for _, i := range at {
			items[i].over = true
		}
		s.observe(label, items, 0, false)
		return nil
	}

	start := time.Now()
	if blocked || weight == 0 {
		ds, _, err := s.store.TakeAll(ctx, domain, keys, 0)
		if err != nil {
			return failed(err, start)
		}
		for j, i := range at {
			items[i].d = ds[j]
			items[i].over = ds[j].Remaining < max(weight, 1)
		}
		s.observe(label, items, time.Since(start), true)
		return nil
	}
	ds, ok, err := s.store.TakeAll(ctx, domain, keys, weight)
	if err != nil {
		return failed(err, start)
	}
	for j, i := range at {
		items[i].d = ds[j]
		items[i].over = !ds[j].Allowed
		items[i].recorded = ok
	}
	if !ok && len(enforced) > 0 && !slices.ContainsFunc(enforced, func(i int) bool { return items[i].over }) {
		keys = keys[:0]
		for _, i := range enforced {
			keys = append(keys, items[i].key)
		}
		ds, ok, err := s.store.TakeAll(ctx, domain, keys, weight)
		if err != nil {
			return failed(err, start)
		}
		for j, i := range enforced {
			items[i].d = ds[j]
			items[i].over = !ds[j].Allowed
			items[i].recorded = ok
		}
	}
	s.observe(label, items, time.Since(start), true)
	return nil
}

// failed answers a request the store could not decide: with the status of
// ctx, the request's, when it ended (the client gave up), else
// UNAVAILABLE, a store past its time budget included.
func (s *service) failed(ctx context.Context, domain string, err error, start time.Time) error {
	s.metrics.storeError(domain, err, time.Since(start))
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
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
		// Refused without a decision: a limit of 0, or weights the store
		// cannot decide together. Report the limit that refuses.
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
	return &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       currentLimit(r.limitNamed(d.Policy), d.Limit, d.Window),
		LimitRemaining:     uint32(min(max(d.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: durationpb.New(d.RefillAfter),
	}
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
