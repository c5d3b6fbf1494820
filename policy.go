package keyrate

import "time"

// Policy is one limit: at most Limit events per key in any span of length
// Window.
type Policy struct {
	// Name identifies the policy in headers and metrics; it may be "" for a
	// Limiter's only policy.
	Name string
	// Limit is the most events admitted per key in any window: 1 to
	// math.MaxInt32.
	Limit int
	// Window is the length of the sliding window; positive.
	Window time.Duration
}
