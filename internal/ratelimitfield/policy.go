package ratelimitfield

import (
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
)

// AppendPolicy appends p's RateLimit-Policy member under route (see
// AppendName): its name, its quota q, the quota unit qu unless unit is ""
// (the draft's default, requests), and its window w unless that is not a
// whole number of seconds (see WholeSeconds).
func AppendPolicy(b []byte, route string, p keyrate.Policy, unit string) []byte {
	b = AppendName(b, route, p.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(p.Limit), 10)
	if unit != "" {
		b = append(b, ";qu="...)
		b = AppendString(b, unit)
	}
	if w := WholeSeconds(p.Window); w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, w, 10)
	}
	return b
}

// AppendPolicies appends the RateLimit-Policy list of parts: their members
// in order, separated by ", ". A part whose limit is unknown (0, from a
// backend that reports none) has no member: q is required. It returns b
// as it was when no part has one.
func AppendPolicies(b []byte, route string, parts []keyrate.PolicyDecision, unit string) []byte {
	start := len(b)
	for i := range parts {
		if parts[i].Limit <= 0 {
			continue
		}
		if len(b) > start {
			b = append(b, ", "...)
		}
		b = AppendPolicy(b, route, parts[i].Policy, unit)
	}
	return b
}

// WholeSeconds returns window in seconds for the w parameter, or 0 when it
// is not a positive whole number of seconds: w has no fractions, and
// rounding would advertise a policy the limiter does not enforce (10 per
// 500ms is not 10 per second).
func WholeSeconds(window time.Duration) int64 {
	if window <= 0 || window%time.Second != 0 {
		return 0
	}
	return int64(window / time.Second)
}
