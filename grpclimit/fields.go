package grpclimit

import (
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/keyrate/keyrate"
)

// The metadata keys of the IETF RateLimit fields, lower case as gRPC sends
// them.
const (
	mdPolicy    = "ratelimit-policy"
	mdRateLimit = "ratelimit"
)

// fields returns the header metadata for d:
//
//	ratelimit-policy: "name";q=LIMIT;w=WINDOW_SECONDS
//	ratelimit: "name";r=REMAINING;t=SECONDS
//
// t is, on a refusal that waiting can cure, the whole seconds until the call
// would fit, rounded up (the RetryInfo delay, rounded); otherwise the whole
// seconds until the oldest event in the window leaves it, the soonest quota
// comes back.
func (r *route) fields(d keyrate.Decision) metadata.MD {
	t := ceilSeconds(d.RefillAfter)
	if !d.Allowed && d.RetryAfter > 0 {
		t = ceilSeconds(d.RetryAfter)
	}
	var buf [64]byte
	b := append(buf[:0], r.name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(d.Remaining, 0)), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	md := metadata.MD{mdRateLimit: {string(b)}}
	if p := r.policyFor(d.Limit); p != "" {
		md[mdPolicy] = []string{p}
	}
	return md
}

// policyFor returns the ratelimit-policy value, from the backend's quota
// when it has one, else from limit; "" when neither is known.
func (r *route) policyFor(limit int) string {
	switch {
	case r.policy != "":
		return r.policy
	case limit > 0:
		return policyValue(r.name, limit, r.window)
	}
	return ""
}

// policyValue writes the policy of name. w, which counts whole seconds,
// is left out when the window is unknown or not a whole number of seconds:
// a rounded w would misstate the policy.
func policyValue(name string, limit int, window time.Duration) string {
	p := name + ";q=" + strconv.Itoa(limit)
	if window > 0 && window%time.Second == 0 {
		p += ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	}
	return p
}

// ceilSeconds rounds d up to whole seconds: a client told to wait that long
// is never early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString returns method as the quoted string that names the policy (a
// structured-field sf-string). Bytes an sf-string cannot hold become '?':
// the name is for people to read; the key keeps the method as it is.
func sfString(method string) string {
	b := make([]byte, 0, len(method)+2)
	b = append(b, '"')
	for i := 0; i < len(method); i++ {
		c := method[i]
		switch {
		case c < 0x20 || c > 0x7e:
			c = '?'
		case c == '"' || c == '\\':
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"'))
}
