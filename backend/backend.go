// Package backend is for authors of a keyrate.Backend (another store, an
// adapter such as middleware): the checks and the binding rule every
// backend shares, the identity a tier function reads, the Receipt a backend
// gives for a refund, and the optional capabilities middleware looks for.
// Applications do not need it: they use keyrate and the backends' own
// packages.
//
// A backend decides by the rules of keyrate.Decision: CheckPolicies
// validates its policies, TierOf chooses a key's tier, Period a calendar
// policy's period, and Combine makes the Decision from each policy's part,
// as *keyrate.Limiter does. backendtest checks that it answers number for
// number as the core does.
package backend

import (
	"context"
	"errors"
	"slices"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/access"
)

// MaxPolicies is the most policies a keyrate.Limiter or one of its tiers
// enforces together: a Decision carries each one's numbers inline.
const MaxPolicies = access.MaxPolicies

// ErrOutOfMemory is wrapped by a backend's error when its store is out of
// memory and cannot record (a Redis at maxmemory): a store failure.
var ErrOutOfMemory = errors.New("keyrate: store out of memory")

// The core's implementations, set by its init (see internal/access).
var (
	checkPolicies = access.CheckPolicies.(func(string, []keyrate.Policy) error)
	combine       = access.Combine.(func([MaxPolicies]keyrate.PolicyDecision, int) keyrate.Decision)
	combineMany   = access.CombineMany.(func(...keyrate.PolicyDecision) keyrate.Decision)
)

// CheckPolicies returns why policies cannot be a tier, naming the field at
// fault (field is "policies", `tiers["pro"]`, or "" for keyrate.New's
// arguments) in an error wrapping keyrate.ErrConfig; or nil: 1 to
// MaxPolicies policies, each with a Limit of 1 to math.MaxInt32, a positive
// Window or else a valid Calendar (never both), and a Name of its own when
// there are several. Every backend checks its policies with it.
func CheckPolicies(field string, policies []keyrate.Policy) error {
	return checkPolicies(field, policies)
}

// Combine makes a backend's Decision from each policy's part, by the binding
// rule every backend shares (see keyrate.Decision); no parts make the zero
// Decision, a refusal.
func Combine(parts ...keyrate.PolicyDecision) keyrate.Decision {
	if len(parts) > MaxPolicies {
		return combineMany(slices.Clone(parts)...)
	}
	// Copied, so that parts stays on the caller's stack.
	var inline [MaxPolicies]keyrate.PolicyDecision
	return combine(inline, copy(inline[:], parts))
}

// TierField returns SetTier's name for tier name's policies in errors, or why
// a backend without tiers (tiered false) cannot have that tier.
func TierField(name string, tiered bool) (string, error) {
	return access.TierField(name, tiered)
}

// TierOf returns the tier the tier function tier names for the request of key
// under ctx: for the identity ctx carries, else key; "" (the default) when
// tier panics. Every backend with tiers asks through it.
func TierOf(ctx context.Context, tier func(string) string, key string) string {
	return access.TierOf(ctx, tier, key)
}
