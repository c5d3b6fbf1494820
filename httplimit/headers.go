package httplimit

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// Canonical forms, so the hot path can index the header map directly.
var (
	hPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	hRateLimit  = http.CanonicalHeaderKey("RateLimit")
	hLimit      = http.CanonicalHeaderKey("RateLimit-Limit")
	hRemaining  = http.CanonicalHeaderKey("RateLimit-Remaining")
	hReset      = http.CanonicalHeaderKey("RateLimit-Reset")
	hXLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hXRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hXReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
	hRetryAfter = http.CanonicalHeaderKey("Retry-After")
)

// setHeaders writes the selected fields for d, a decision about a request
// of weight cost, with f's room; under a token budget, ds are both budgets'
// Decisions and d the one that stands for them. Retry-After is left to the
// refusal itself: a shadowed refusal is served, and gets none.
func (m *Middleware) setHeaders(f *fields, h http.Header, d *keyrate.Decision, cost int, ds []keyrate.Decision) {
	if d.Window == 0 && len(d.Policies()) == 0 {
		// A Decision filled in by hand, without its window: the fields get
		// the fallback, the caller's Decision stays as it was made.
		filled := *d
		filled.Window = m.fallback
		d = &filled
	}
	if ds != nil {
		if m.headers&DraftHeaders != 0 {
			m.setTokenFields(f, h, ds, cost, d.Allowed)
		}
		if m.headers&TokenHeaders != 0 {
			m.setModelFields(f, h, ds)
		}
	} else if m.headers&DraftHeaders != 0 {
		// Both fields are Structured Field Lists: another middleware's
		// members stay, and this one's are added beside them. Under the
		// backend's own policies, RateLimit-Policy was written in New,
		// unless a calendar policy's w changes with its period.
		policy := m.policy
		if policy == "" || m.calendar || !samePolicies(d, m.policies) {
			start := len(f.buf)
			f.buf = ratelimitfield.AppendPolicy(f.buf, d, m.route, m.unit)
			policy = f.value(start)
		}
		if policy != "" {
			f.add(h, hPolicy, policy)
		}
		start := len(f.buf)
		f.buf = m.revision.AppendRateLimit(f.buf, d, m.route, cost)
		f.add(h, hRateLimit, f.value(start))
	}
	if m.headers&(LegacyHeaders|XHeaders) == 0 {
		return
	}
	// The older fields hold one policy each: the binding one, and of nested
	// middlewares the one with the least remaining.
	t, _ := ratelimitfield.T(d)
	remaining := max(d.Remaining, 0)
	if m.headers&LegacyHeaders != 0 && binds(h, hRemaining, remaining) {
		f.set(h, hLimit, f.int(int64(d.Limit)))
		f.set(h, hRemaining, f.int(int64(remaining)))
		f.set(h, hReset, f.int(t))
	}
	if m.headers&XHeaders != 0 && binds(h, hXRemaining, remaining) {
		f.set(h, hXLimit, f.int(int64(d.Limit)))
		f.set(h, hXRemaining, f.int(int64(remaining)))
		f.set(h, hXReset, f.int(time.Now().Unix()+t))
	}
}

// samePolicies reports whether d was decided under policies, in order:
// then their RateLimit-Policy value, written once, serves for d.
func samePolicies(d *keyrate.Decision, policies []keyrate.Policy) bool {
	if parts := d.Policies(); len(parts) > 0 {
		return slices.EqualFunc(parts, policies, func(p keyrate.PolicyDecision, q keyrate.Policy) bool { return p.Policy == q })
	}
	return len(policies) == 1 && policies[0] == keyrate.Policy{Name: d.Policy, Limit: d.Limit, Window: d.Window}
}

// binds reports whether a policy with remaining left should fill the
// single-policy field k: it is empty, or says more remains.
func binds(h http.Header, k string, remaining int) bool {
	old := h[k]
	if len(old) == 0 {
		return true
	}
	n, err := strconv.Atoi(old[0])
	return err != nil || remaining < n
}

// setRetryAfter writes Retry-After, unless another middleware already asked
// for a longer wait.
func setRetryAfter(h http.Header, seconds int64) {
	if waits(h, seconds) {
		h[hRetryAfter] = []string{strconv.FormatInt(seconds, 10)}
	}
}

// setRetryAfter is setRetryAfter with f's room.
func (f *fields) setRetryAfter(h http.Header, seconds int64) {
	if waits(h, seconds) {
		f.set(h, hRetryAfter, f.int(seconds))
	}
}

// waits reports whether a wait of seconds should be Retry-After: no other
// middleware already asked for one as long.
func waits(h http.Header, seconds int64) bool {
	if old := h[hRetryAfter]; len(old) > 0 {
		if n, err := strconv.ParseInt(old[0], 10, 64); err == nil && n >= seconds {
			return false
		}
	}
	return true
}

// setPolicy adds RateLimit-Policy alone, for a request served without a
// decision (FailOpen), when the policy is known without one.
func (m *Middleware) setPolicy(h http.Header) {
	if m.headers&DraftHeaders != 0 && m.policy != "" {
		h[hPolicy] = append(h[hPolicy], m.policy)
	}
}

// resetHeaders rewrites the fields setHeaders wrote for d, a decision about
// a request of weight cost, once given of its weight has been given back
// before the response's status went out: the RateLimit member of this
// middleware, and the single-policy remaining fields where they are this
// middleware's, say what the request left. The time parameters stay the
// decision's.
func (m *Middleware) resetHeaders(f *fields, h http.Header, d *keyrate.Decision, cost, given int) {
	if d.Window == 0 && len(d.Policies()) == 0 {
		d.Window = m.fallback
	}
	after := *d
	after.Remaining = min(after.Remaining+given, after.Limit)
	for i := range after.Policies() {
		p := &after.Policies()[i]
		p.Remaining = min(p.Remaining+given, p.Limit)
	}
	var scratch [128]byte // the values written before, to find them by
	if m.headers&DraftHeaders != 0 {
		old := m.revision.AppendRateLimit(scratch[:0], d, m.route, cost)
		start := len(f.buf)
		f.buf = m.revision.AppendRateLimit(f.buf, &after, m.route, cost-given)
		replace(h, hRateLimit, old, f.value(start))
	}
	if m.headers&(LegacyHeaders|XHeaders) == 0 {
		return
	}
	old, now := strconv.AppendInt(scratch[:0], int64(max(d.Remaining, 0)), 10), f.int(int64(max(after.Remaining, 0)))
	if m.headers&LegacyHeaders != 0 {
		replace(h, hRemaining, old, now)
	}
	if m.headers&XHeaders != 0 {
		replace(h, hXRemaining, old, now)
	}
}

// replace puts new in the place of the first value old of field k.
func replace(h http.Header, k string, old []byte, new string) {
	vs := h[k]
	for i, v := range vs {
		if v == string(old) {
			vs[i] = new
			return
		}
	}
}
