package redislimit

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/keyrate/keyrate"
)

// unsetConfig is a config with every field that an option sets, save
// those NewConcurrency takes, at a value no valid option writes, so that
// any other option shows, one that writes a zero value included.
func unsetConfig() config {
	return config{
		algorithm:     math.MaxUint8,
		denyKeys:      math.MinInt,
		denyHold:      math.MinInt64,
		res:           math.MinInt64,
		fallbackShare: -1,
		fallbackKeys:  math.MinInt,
	}
}

// concurrencyConfig applies NewConcurrency's options: WithPrefix,
// WithTimeout, WithTiers and WithHashTagSecret. Each option is first
// applied alone to a config whose other fields no option has set: one that
// changes any of them configures rate decisions (an algorithm, a deny
// cache, a fallback...), and is refused, whatever it is.
func concurrencyConfig(opts []Option) (config, error) {
	for i, o := range opts {
		if o == nil {
			continue
		}
		probe := unsetConfig()
		o(&probe)
		probe.prefix, probe.timeout, probe.clock = "", 0, nil
		probe.tierSet, probe.tierOf, probe.tiers = false, nil, nil
		probe.tagSecret, probe.tagSet = nil, false
		if !reflect.DeepEqual(probe, unsetConfig()) {
			return config{}, fmt.Errorf("%w: option %d configures rate decisions, not in-flight slots: NewConcurrency takes WithPrefix, WithTimeout, WithTiers and WithHashTagSecret", keyrate.ErrConfig, i)
		}
	}
	return newConfig(opts)
}

// slotLimits returns the in-flight limit of each tier of tiers: the
// Limit of its one policy, which has no window and no name.
func slotLimits(tiers map[string][]keyrate.Policy) (map[string]int, error) {
	limits := make(map[string]int, len(tiers))
	for _, name := range slices.Sorted(maps.Keys(tiers)) { // the first error in a fixed order
		field := fmt.Sprintf("tiers[%q]", name)
		policies := tiers[name]
		switch {
		case name == "":
			return nil, fmt.Errorf("%w: %s: the default tier is NewConcurrency's limit", keyrate.ErrConfig, field)
		case len(policies) != 1:
			return nil, fmt.Errorf("%w: %s has %d policies, want one: an in-flight limit is one number", keyrate.ErrConfig, field, len(policies))
		case policies[0].Calendar != (keyrate.Calendar{}):
			return nil, fmt.Errorf("%w: %s[0].Calendar is %s, want none: an in-flight limit has no period", keyrate.ErrConfig, field, policies[0].Calendar)
		case policies[0].Window != 0:
			return nil, fmt.Errorf("%w: %s[0].Window is %v, want 0: an in-flight limit has no window", keyrate.ErrConfig, field, policies[0].Window)
		case policies[0].Name != "":
			return nil, fmt.Errorf("%w: %s[0].Name is %q, want none: an in-flight limit's name is the caller's", keyrate.ErrConfig, field, policies[0].Name)
		case policies[0].Limit < 1 || policies[0].Limit > math.MaxInt32:
			return nil, fmt.Errorf("%w: %s[0].Limit is %d, want 1 to %d", keyrate.ErrConfig, field, policies[0].Limit, math.MaxInt32)
		}
		limits[name] = policies[0].Limit
	}
	return limits, nil
}

// checkLeaseTTL refuses a time to live too short to renew a lease in time:
// a renewal is sent every ttl/3 and may take the whole time budget, so the
// budget must fit in what is left before the lease lapses, with room to
// spare.
func checkLeaseTTL(ttl, budget time.Duration) error {
	switch {
	case ttl < time.Millisecond || ttl%time.Microsecond != 0:
		return fmt.Errorf("%w: lease time to live is %v, want at least 1ms in whole microseconds", keyrate.ErrConfig, ttl)
	case ttl < 2*budget:
		return fmt.Errorf("%w: lease time to live is %v, want at least twice the time budget (WithTimeout, %v), so that a renewal lands before its lease lapses", keyrate.ErrConfig, ttl, budget)
	}
	return nil
}
