package keyrate

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// checkConcurrency validates NewConcurrency's arguments: each limit 1 to
// math.MaxInt32, tiers only with a tier function, none named "".
func checkConcurrency(limit int, tier func(string) string, tiers map[string]int) error {
	if limit < 1 || limit > math.MaxInt32 {
		return fmt.Errorf("%w: limit is %d, want 1 to %d", ErrConfig, limit, math.MaxInt32)
	}
	if tier == nil && len(tiers) > 0 {
		return fmt.Errorf("%w: tier function is nil, beside %d tiers", ErrConfig, len(tiers))
	}
	for _, name := range slices.Sorted(maps.Keys(tiers)) { // the first error in a fixed order
		field := fmt.Sprintf("tiers[%q]", name)
		switch n := tiers[name]; {
		case name == "":
			return fmt.Errorf("%w: %s: the default tier is NewConcurrency's limit", ErrConfig, field)
		case n < 1 || n > math.MaxInt32:
			return fmt.Errorf("%w: %s is %d, want 1 to %d", ErrConfig, field, n, math.MaxInt32)
		}
	}
	return nil
}
