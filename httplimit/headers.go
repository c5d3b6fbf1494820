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

// setHeaders writes the selected fields for d, and Retry-After when d is a
// refusal that waiting can cure.
//
// t (and the Reset fields) is, on a refusal, the whole seconds until this
// request would fit, rounded up, the same number as Retry-After; on an
// admission, the whole seconds until the key's full quota is back.
func (m *Middleware) setHeaders(h http.Header, d keyrate.Decision) {
	remaining := max(d.Remaining, 0)
	retry := !d.Allowed && d.RetryAfter > 0
	t := ceilSeconds(d.ResetAfter)
	if retry {
		t = ceilSeconds(d.RetryAfter)
	}
	n := 0
	if m.headers&DraftHeaders != 0 {
		n += 2
	}
	if m.headers&LegacyHeaders != 0 {
		n += 3
	}
	if m.headers&XHeaders != 0 {
		n += 3
	}
	if retry {
		n++
	}
	// One backing array for every value slice: one allocation, not one per field.
	vals := make([]string, n)
	set := func(k, v string) {
		vals[0] = v
		h[k], vals = vals[:1:1], vals[1:]
	}
	if m.headers&DraftHeaders != 0 {
		policy := m.policy
		if policy == "" {
			policy = m.policyFor(d.Limit)
		}
		set(hPolicy, policy)
		var buf [64]byte
		b := append(buf[:0], m.name...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
		set(hRateLimit, string(b))
	}
	if m.headers&LegacyHeaders != 0 {
		set(hLimit, strconv.Itoa(d.Limit))
		set(hRemaining, strconv.Itoa(remaining))
		set(hReset, strconv.FormatInt(t, 10))
	}
	if m.headers&XHeaders != 0 {
		set(hXLimit, strconv.Itoa(d.Limit))
		set(hXRemaining, strconv.Itoa(remaining))
		set(hXReset, strconv.FormatInt(time.Now().Unix()+t, 10))
	}
	if retry {
		set(hRetryAfter, strconv.FormatInt(t, 10))
	}
}

// setPolicy writes RateLimit-Policy alone, for a request served without a
// decision (FailOpen), when the policy is known without one.
func (m *Middleware) setPolicy(h http.Header) {
	if m.headers&DraftHeaders != 0 && m.policy != "" {
		h[hPolicy] = []string{m.policy}
	}
}

func (m *Middleware) policyFor(limit int) string {
	return m.name + ";q=" + strconv.Itoa(limit) + ";w=" + strconv.FormatInt(m.windowSec, 10)
}

// ceilSeconds rounds d up to whole seconds: a client told to wait that long
// is never early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString returns route as the quoted string that names the policy in the
// RateLimit fields (a structured-field sf-string), "default" when empty.
func sfString(route string) (string, error) {
	if route == "" {
		route = "default"
	}
	b := []byte{'"'}
	for i := 0; i < len(route); i++ {
		c := route[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: httplimit: route %q: only printable ASCII can name a policy", keyrate.ErrConfig, route)
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"')), nil
}
