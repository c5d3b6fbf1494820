package keyrate

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"
)

// slotTiers is what NewConcurrency takes from its options: WithTiers'
// function and each tier's limit; both nil without it.
type slotTiers struct {
	tierOf func(key string) string
	limits map[string]int
}

// unsetClock marks a config whose clock no option has set.
type unsetClock struct{}

func (unsetClock) Now() time.Time { return time.Time{} }

// unsetConfig is a config with every field that an option sets, save
// WithTiers', at a value no valid option writes, so that any option that
// writes one shows, WithClock(nil) and WithMaxKeys(0) included.
func unsetConfig() config {
	return config{
		clock:           unsetClock{},
		coarse:          math.MinInt64,
		resolution:      math.MinInt64,
		algorithm:       math.MaxUint8,
		janitorInterval: math.MinInt64,
		maxKeys:         math.MinInt,
		maxWindow:       math.MinInt64,
	}
}

// newSlotTiers validates NewConcurrency's limit and options. An option is
// applied alone to a config whose fields no option has set: one that
// changes anything but WithTiers' fields configures counting over time,
// and is refused, whatever it is (an option added later included).
func newSlotTiers(limit int, opts []Option) (slotTiers, error) {
	if limit < 1 || limit > math.MaxInt32 {
		return slotTiers{}, fmt.Errorf("%w: limit is %d, want 1 to %d", ErrConfig, limit, math.MaxInt32)
	}
	var cfg config
	for i, o := range opts {
		if o == nil {
			continue
		}
		probe := unsetConfig()
		o(&probe)
		probe.tierSet, probe.tierOf, probe.tiers = false, nil, nil
		if !reflect.DeepEqual(probe, unsetConfig()) {
			return slotTiers{}, fmt.Errorf("%w: option %d configures counting over time, which an in-flight limit does not do: NewConcurrency takes WithTiers alone", ErrConfig, i)
		}
		o(&cfg)
	}
	if !cfg.tierSet {
		return slotTiers{}, nil
	}
	if cfg.tierOf == nil {
		return slotTiers{}, fmt.Errorf("%w: tier function is nil", ErrConfig)
	}
	limits := make(map[string]int, len(cfg.tiers))
	for _, name := range slices.Sorted(maps.Keys(cfg.tiers)) { // the first error in a fixed order
		n, err := slotLimit(name, cfg.tiers[name])
		if err != nil {
			return slotTiers{}, err
		}
		limits[name] = n
	}
	return slotTiers{tierOf: cfg.tierOf, limits: limits}, nil
}

// slotLimit returns the in-flight limit of the tier called name: its one
// policy's Limit, which must come alone.
func slotLimit(name string, policies []Policy) (int, error) {
	field := fmt.Sprintf("tiers[%q]", name)
	if name == "" {
		return 0, fmt.Errorf("%w: %s: the default tier is NewConcurrency's limit", ErrConfig, field)
	}
	if len(policies) != 1 {
		return 0, fmt.Errorf("%w: %s has %d policies, want one: an in-flight limit is one number", ErrConfig, field, len(policies))
	}
	p := policies[0]
	switch {
	case p.Window != 0:
		return 0, fmt.Errorf("%w: %s[0].Window is %v, want 0: an in-flight limit has no window", ErrConfig, field, p.Window)
	case p.Calendar != (Calendar{}):
		return 0, fmt.Errorf("%w: %s[0].Calendar is %v, want none: an in-flight limit has no period", ErrConfig, field, p.Calendar)
	case p.Name != "":
		return 0, fmt.Errorf("%w: %s[0].Name is %q, want none: an in-flight limit's name is the caller's", ErrConfig, field, p.Name)
	case p.Limit < 1 || p.Limit > math.MaxInt32:
		return 0, fmt.Errorf("%w: %s[0].Limit is %d, want 1 to %d", ErrConfig, field, p.Limit, math.MaxInt32)
	}
	return p.Limit, nil
}
