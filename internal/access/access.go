// Package access hands package backend the core's implementations of what
// backend exports for backend authors. They read and write fields the core
// keeps unexported, and the core cannot import backend, which imports it:
// so the core sets each variable here in its init, which runs before that
// of any package importing the core. A variable typed any holds a func of
// the type its comment names, in the core's types.
package access

import (
	"context"
)

// MaxPolicies is the most policies a tier holds: keyrate's arrays are this
// long, and backend.MaxPolicies says it.
const MaxPolicies = 4

var (
	// CheckPolicies is func(field string, policies []keyrate.Policy) error.
	CheckPolicies any
	// Combine is func(parts [MaxPolicies]keyrate.PolicyDecision, n int)
	// keyrate.Decision, of parts[:n]: an array passed by value stays on
	// the caller's stack, where a slice passed through a variable would
	// move to the heap, an allocation per decision. CombineMany is
	// func(parts ...keyrate.PolicyDecision) keyrate.Decision, for more.
	Combine, CombineMany any
	// NewReceipt is func(at time.Time, n int, id uint64) keyrate.Receipt.
	NewReceipt any
	// ReceiptAt is func(keyrate.Receipt) time.Time, ReceiptID
	// func(keyrate.Receipt) uint64.
	ReceiptAt, ReceiptID any
	// Period is func(keyrate.Calendar, time.Time) (start, end time.Time).
	Period any

	// TierField names tier name's policies in errors (see backend.TierField).
	TierField func(name string, tiered bool) (string, error)
	// TierOf is the tier the tier function names for key under ctx (see
	// backend.TierOf).
	TierOf func(ctx context.Context, tier func(string) string, key string) string
)
