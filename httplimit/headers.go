package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
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

// usage is what the fields say about one policy after one decision. A
// Decision covers one policy today; the fields are written from a list of
// usages so that one covering several can list every one.
type usage struct {
	name      string // the policy's name as a structured-field string, quoted
	policy    string // its RateLimit-Policy member; "" until a decision gives the limit
	limit     int
	remaining int
	t         int64 // whole seconds, rounded up; see resetSeconds
	hasT      bool
}

// usage returns the fields' view of d.
func (m *Middleware) usage(d keyrate.Decision) usage {
	u := usage{name: m.name, policy: m.policy, limit: d.Limit, remaining: max(d.Remaining, 0)}
	u.t, u.hasT = resetSeconds(d)
	return u
}

// resetSeconds returns RateLimit's t for d: the whole seconds, rounded up,
// until more quota is made available, and false when none will be because
// the window holds no events.
//
// On a refusal that waiting can cure it is when this request would fit,
// the same number as Retry-After (for a request of weight 1, the soonest
// any quota comes back; for a heavier one, when enough has). Otherwise it
// is when the oldest event in the window leaves it (Decision.RefillAfter),
// not when the window is empty: a sliding log gives quota back one event
// at a time. A backend that does not compute RefillAfter (0 while events
// are held) gets ResetAfter, later but never early.
func resetSeconds(d keyrate.Decision) (int64, bool) {
	if !d.Allowed && d.RetryAfter > 0 {
		return ceilSeconds(d.RetryAfter), true
	}
	refill := d.RefillAfter
	if refill <= 0 {
		refill = d.ResetAfter
	}
	if refill <= 0 {
		return 0, false
	}
	return ceilSeconds(refill), true
}

// setHeaders writes the selected fields for d. Retry-After is left to the
// refusal itself: a shadowed refusal is served, and gets none.
func (m *Middleware) setHeaders(h http.Header, d keyrate.Decision) {
	u := m.usage(d)
	f := m.newFields()
	if m.headers&DraftHeaders != 0 {
		// Both fields are Structured Field Lists: another middleware's
		// members stay, and this one's are added beside them.
		policy := u.policy
		if policy == "" {
			policy = f.value(appendPolicy(f.buf, m.name, u.limit, m.unit, m.windowSec))
		}
		f.add(h, hPolicy, policy)
		f.add(h, hRateLimit, f.value(appendUsage(f.buf, u)))
	}
	// The older fields hold one policy each: the one with the least
	// remaining, of this middleware and any other that wrote them first.
	if m.headers&LegacyHeaders != 0 && binds(h, hRemaining, u.remaining) {
		f.set(h, hLimit, f.value(strconv.AppendInt(f.buf, int64(u.limit), 10)))
		f.set(h, hRemaining, f.value(strconv.AppendInt(f.buf, int64(u.remaining), 10)))
		f.set(h, hReset, f.value(strconv.AppendInt(f.buf, u.t, 10)))
	}
	if m.headers&XHeaders != 0 && binds(h, hXRemaining, u.remaining) {
		f.set(h, hXLimit, f.value(strconv.AppendInt(f.buf, int64(u.limit), 10)))
		f.set(h, hXRemaining, f.value(strconv.AppendInt(f.buf, int64(u.remaining), 10)))
		f.set(h, hXReset, f.value(strconv.AppendInt(f.buf, time.Now().Unix()+u.t, 10)))
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

// policyMember returns this middleware's RateLimit-Policy member for limit.
func (m *Middleware) policyMember(limit int) string {
	return string(appendPolicy(nil, m.name, limit, m.unit, m.windowSec))
}

// appendPolicy appends a RateLimit-Policy member: the policy's name, its
// quota q, its quota unit qu unless unit is "" (the draft's default,
// requests), and its window w in seconds unless windowSec is 0 (a window
// that is not a whole number of seconds, which w cannot say).
func appendPolicy(b []byte, name string, limit int, unit string, windowSec int64) []byte {
	b = append(b, name...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(limit), 10)
	if unit != "" {
		b = append(b, ";qu="...)
		b = append(b, unit...)
	}
	if windowSec > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, windowSec, 10)
	}
	return b
}

// appendUsage appends a RateLimit member: the policy's name, the remaining
// quota r, and t when more quota is to come.
func appendUsage(b []byte, u usage) []byte {
	b = append(b, u.name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(u.remaining), 10)
	if u.hasT {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, u.t, 10)
	}
	return b
}

// wholeSeconds returns window in seconds for the w parameter, or 0 when it
// is not a whole number of seconds: w has no fractions, and rounding would
// advertise a policy the limiter does not enforce (10 per 500ms is not 10
// per second).
func wholeSeconds(window time.Duration) int64 {
	if window%time.Second != 0 {
		return 0
	}
	return int64(window / time.Second)
}

// ceilSeconds rounds d up to whole seconds: a client told to wait that long
// is never early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString returns s as a quoted structured-field string, for a policy name
// or a quota unit; what names the error. Only printable ASCII can be one.
func sfString(what, s string) (string, error) {
	b := []byte{'"'}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: httplimit: %s %q: only printable ASCII fits a RateLimit field", keyrate.ErrConfig, what, s)
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"')), nil
}

// policyName is the name the fields give the policy of route.
func policyName(route string) string {
	if route == "" {
		return "default"
	}
	return route
}
