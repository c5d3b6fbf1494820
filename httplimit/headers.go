package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/ratelimitfield"
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

// setHeaders writes the selected fields for d. Retry-After is left to the
// refusal itself: a shadowed refusal is served, and gets none.
func (m *Middleware) setHeaders(h http.Header, d *keyrate.Decision) {
	var one [1]keyrate.PolicyDecision
	parts := ratelimitfield.Parts(d, m.fallback, &one)
	f := m.newFields()
	// Values are written here and copied into strings of their own; one
	// policy's members fit, and more only cost the buffer's growth.
	var scratch [128]byte
	if m.headers&DraftHeaders != 0 {
		// Both fields are Structured Field Lists: another middleware's
		// members stay, and this one's are added beside them. Under the
		// backend's own policies, RateLimit-Policy was written in New.
		policy := m.policy
		if policy == "" || !ratelimitfield.Same(parts, m.policies) {
			policy = string(ratelimitfield.AppendPolicies(scratch[:0], m.route, parts, m.unit))
		}
		if policy != "" {
			f.add(h, hPolicy, policy)
		}
		f.add(h, hRateLimit, string(ratelimitfield.AppendUsages(scratch[:0], m.route, parts)))
	}
	if m.headers&(LegacyHeaders|XHeaders) == 0 {
		return
	}
	// The older fields hold one policy each: the binding one, and of nested
	// middlewares the one with the least remaining.
	binding := ratelimitfield.Binding(d)
	t, _ := ratelimitfield.T(&binding)
	remaining := max(d.Remaining, 0)
	if m.headers&LegacyHeaders != 0 && binds(h, hRemaining, remaining) {
		f.set(h, hLimit, strconv.Itoa(d.Limit))
		f.set(h, hRemaining, strconv.Itoa(remaining))
		f.set(h, hReset, strconv.FormatInt(t, 10))
	}
	if m.headers&XHeaders != 0 && binds(h, hXRemaining, remaining) {
		f.set(h, hXLimit, strconv.Itoa(d.Limit))
		f.set(h, hXRemaining, strconv.Itoa(remaining))
		f.set(h, hXReset, strconv.FormatInt(time.Now().Unix()+t, 10))
	}
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
	if old := h[hRetryAfter]; len(old) > 0 {
		if n, err := strconv.ParseInt(old[0], 10, 64); err == nil && n >= seconds {
			return
		}
	}
	h[hRetryAfter] = []string{strconv.FormatInt(seconds, 10)}
}

// setPolicy adds RateLimit-Policy alone, for a request served without a
// decision (FailOpen), when the policy is known without one.
func (m *Middleware) setPolicy(h http.Header) {
	if m.headers&DraftHeaders != 0 && m.policy != "" {
		h[hPolicy] = append(h[hPolicy], m.policy)
	}
}
