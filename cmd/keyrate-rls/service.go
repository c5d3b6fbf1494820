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

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
)

// service answers Envoy's ShouldRateLimit from the rules it has loaded and
// the budgets in its store.
type service struct {
	rlspb.UnimplementedRateLimitServiceServer

	store     store
	metrics   *metrics
	log       *slog.Logger
	opts      serviceOptions
	rules     atomic.Pointer[ruleSet]
	overrides overrides

	mu      sync.Mutex                  // serialises load
	tiers   map[string]string           // rule path -> tier name; a path keeps its tier for good
	applied map[string][]keyrate.Policy // tier name -> the policies last set on it
}

// serviceOptions are the settings that change how requests are answered,
// envoyproxy/ratelimit's environment variables of the same meaning.
type serviceOptions struct {
	// shadow is SHADOW_MODE: every request is decided and counted as if
	// enforced, and answered OK overall.
	shadow bool
	// quota is QUOTA_MODE: every descriptor is in quota mode.
	quota bool
	// dynamicMetadata is RESPONSE_DYNAMIC_METADATA: the response carries
	// the request and the metadata of the rules it passed.
	dynamicMetadata bool
	// headers are the response headers to add (LIMIT_RESPONSE_HEADERS_ENABLED
	// and -ratelimit-fields); the zero value adds none.
	headers responseHeaders
	// maxOverridesPerDomain bounds the limit overrides each domain keeps
	// at once (0: defaultOverridesPerDomain).
	maxOverridesPerDomain int
	// clock is the in-process store's (nil: the system clock), for tests.
	clock keyrate.Clock
}

// newService returns a service over st that has loaded rs.
func newService(st store, m *metrics, log *slog.Logger, rs *ruleSet, opts serviceOptions) (*service, error) {
	s := &service{
		store:   st,
		metrics: m,
		log:     log,
		opts:    opts,
		tiers:   map[string]string{},
		applied: map[string][]keyrate.Policy{},
	}
	s.overrides.init(st, log, opts.clock, opts.maxOverridesPerDomain)
	if err := s.load(rs); err != nil {
		return nil, err
	}
	return s, nil
}

// maxRuleTiers bounds the rules a service remembers (every path it has
// loaded, each a tier of the store), so that reloads cannot grow it
// without end.
const maxRuleTiers = 65_536

// load makes rs the rules requests are decided by. Each rule gets a tier
// named after its path (see ruleTier), the same as that of a rule of the
// same path in an earlier load, so that its budgets keep their counts; a
// rule whose limits changed has its tier's policies replaced first, so
// that no request is decided under rs before its tiers exist.
func (s *service) load(rs *ruleSet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh := 0
	for _, r := range rs.rules {
		if _, ok := s.tiers[r.path]; !ok {
			fresh++
		}
	}
	if len(s.tiers)+fresh > maxRuleTiers {
		return fmt.Errorf("%d rules: the service would remember %d rules in all, past its bound of %d (restart it to forget the rules no longer loaded)",
			len(rs.rules), len(s.tiers)+fresh, maxRuleTiers)
	}
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
			return fmt.Errorf("rule at %s:%d: %w", r.file, r.line, err)
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
// it against that rule's budget, each at its own weight, all or nothing
// (one refusal records nothing against the others), and the overall code
// is OVER_LIMIT when a descriptor neither in shadow nor in quota mode is
// over its limit, or when every descriptor in quota mode is. Statuses
// come in the order of the descriptors.
func (s *service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		s.metrics.serviceError()
		return nil, status.Error(codes.InvalidArgument, "the rate limit domain is empty")
	case len(descs) == 0:
		s.metrics.serviceError()
		return nil, status.Error(codes.InvalidArgument, "the request has no descriptors")
	case len(descs) > maxDescriptors:
		s.metrics.serviceError()
		return nil, status.Errorf(codes.InvalidArgument, "the request has %d descriptors, want at most %d", len(descs), maxDescriptors)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	rs := s.rules.Load()
	if rs.none {
		s.metrics.serviceError()
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded: the rules were invalid at start (see the log)")
	}
	domain := req.GetDomain()
	items := make([]item, len(descs))
	var replaced []string
	for i, desc := range descs {
		it := &items[i]
		switch {
		case rs.domains[domain] == nil:
			// As envoyproxy/ratelimit: no rule, nor override, outside the
			// configured domains.
		case desc.GetLimit() != nil:
			it.rule, it.key = s.overrides.match(domain, desc)
		default:
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
		// As envoyproxy/ratelimit counts it: once per descriptor looked up.
		s.metrics.domainNotFound.Add(float64(len(descs)))
	}
	refused, err := s.decide(ctx, domain, label, items)
	if err != nil {
		return nil, err
	}
	resp := s.response(req, items, refused)
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
