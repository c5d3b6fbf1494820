package keyrate

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Option configures a Limiter, for New and NewPolicies. Every option says its
// default; an invalid one makes the constructor return an ErrConfig error.
type Option func(*config)

type config struct {
	clock           Clock
	coarse          time.Duration
	resolution      time.Duration
	resolutionSet   bool
	algorithm       Algorithm
	base            time.Time // the clock's reading at creation: instant 0
	janitorInterval time.Duration
	janitorSet      bool
	maxKeys         int
	refuseNewKeys   bool
	maxWindow       time.Duration
	tierSet         bool // WithTiers was given
	tierOf          func(key string) string
	tiers           map[string][]Policy
	scale           scale // built by newConfig: every log's ticks
	calendars       bool  // built by newConfig: a tier has a calendar policy
}

// WithAlgorithm chooses how the limiter counts (see Algorithm); WithResolution
// is for SlidingLog alone. Default: SlidingLog.
func WithAlgorithm(a Algorithm) Option {
	return func(cfg *config) { cfg.algorithm = a }
}

// WithClock sets the clock the limiter reads (default: the system clock's
// monotonic reading; a ManualClock pins instants in tests). A clock that runs
// back never over-admits: a key is decided at the newest instant it has seen.
func WithClock(c Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// WithCoarseClock decides at an instant a goroutine reads once per interval:
// a load instead of a clock read, at the price of stamping events up to
// interval early. interval must be positive and shorter than every window;
// not with WithClock. Default: off.
func WithCoarseClock(interval time.Duration) Option {
	return func(cfg *config) { cfg.coarse = interval }
}

// WithResolution makes the events of one tick of d share an 8-byte entry: at
// most longest window/d + 2 per key whatever the limits (100,000 a day at a
// minute: 12 KB a key, not 400 KB), a refusal up to d early, never an
// admission over a limit. d is at most the shortest window. Default: off.
func WithResolution(d time.Duration) Option {
	return func(cfg *config) { cfg.resolution, cfg.resolutionSet = d, true }
}

// WithMaxWindow lets SetTier add windows up to d. A limiter's tick is fixed
// for its life by its longest window (5ns for 10s, 50µs for a day); a longer
// one needs a coarser tick, moving refusals at most a tick earlier. Default:
// the longest window given.
func WithMaxWindow(d time.Duration) Option {
	return func(cfg *config) { cfg.maxWindow = d }
}

// WithJanitorInterval sets how often a goroutine evicts idle keys and shrinks
// quiet ones' rings, walking every key, one lock at a time. Default: the
// longest window, within [1s, 1m] (1m with a calendar policy). 0 disables
// it: combine that with WithMaxKeys or a closed set of keys.
func WithJanitorInterval(d time.Duration) Option {
	return func(cfg *config) { cfg.janitorInterval, cfg.janitorSet = d, true }
}

// WithMaxKeys bounds the keys tracked at n against a flood of made up keys: a
// new key at the bound evicts the n/16 decided least recently, events and
// calendar counts all. Size n a sixteenth above the clients active in the
// longest window or period. Default: 0, no bound.
func WithMaxKeys(n int) Option {
	return func(cfg *config) { cfg.maxKeys = n }
}

// WithRefuseNewKeys makes a full limiter (WithMaxKeys) refuse new keys, with
// Overflow, rather than evict; room then comes back only as keys go idle.
// Default: off.
func WithRefuseNewKeys() Option {
	return func(cfg *config) { cfg.refuseNewKeys = true }
}

// WithTiers gives keys their plan's policies: tier names a key's tier, and a
// key in no tier of tiers gets the default. tier runs on every decision: it
// must be cheap and safe for concurrent use, and a panic in it means the
// default. It sees the identity httplimit and grpclimit send
// (backend.ContextWithIdentity), else the key. Default: no tiers.
func WithTiers(tier func(key string) string, tiers map[string][]Policy) Option {
	return func(cfg *config) {
		cfg.tierSet = true
		cfg.tierOf = tier
		cfg.tiers = maps.Clone(tiers)
	}
}

// newConfig applies opts for a limiter whose default tier is def, validates
// them and builds the tier table.
func newConfig(def *tier, opts []Option) (config, *tierTable, error) {
	cfg := config{clock: systemClock{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.clock == nil:
		return config{}, nil, fmt.Errorf("%w: clock is nil", ErrConfig)
	case cfg.coarse > 0 && cfg.clock != (systemClock{}):
		return config{}, nil, fmt.Errorf("%w: coarse clock cannot be combined with WithClock", ErrConfig)
	case cfg.resolution < 0 || cfg.resolutionSet && cfg.resolution == 0:
		return config{}, nil, fmt.Errorf("%w: resolution is %v, want > 0", ErrConfig, cfg.resolution)
	case cfg.coarse < 0:
		return config{}, nil, fmt.Errorf("%w: coarse clock resolution is %v, want > 0", ErrConfig, cfg.coarse)
	case cfg.janitorInterval < 0:
		return config{}, nil, fmt.Errorf("%w: janitor interval is %v, want >= 0", ErrConfig, cfg.janitorInterval)
	case cfg.maxWindow < 0:
		return config{}, nil, fmt.Errorf("%w: max window is %v, want >= 0", ErrConfig, cfg.maxWindow)
	case cfg.maxKeys < 0:
		return config{}, nil, fmt.Errorf("%w: max keys is %d, want >= 0", ErrConfig, cfg.maxKeys)
	case cfg.refuseNewKeys && cfg.maxKeys == 0:
		return config{}, nil, fmt.Errorf("%w: refusing new keys needs a bound: WithMaxKeys(n) with n > 0", ErrConfig)
	case cfg.algorithm > GCRA:
		return config{}, nil, fmt.Errorf("%w: unknown algorithm %d", ErrConfig, cfg.algorithm)
	case cfg.resolutionSet && cfg.algorithm != SlidingLog:
		return config{}, nil, fmt.Errorf("%w: resolution applies to the sliding log, not to %v", ErrConfig, cfg.algorithm)
	case cfg.tierSet && cfg.tierOf == nil:
		return config{}, nil, fmt.Errorf("%w: tier function is nil", ErrConfig)
	}
	cfg.base = cfg.clock.Now()
	tab := newTierTable(def)
	for _, name := range slices.Sorted(maps.Keys(cfg.tiers)) { // ids, and the first error, in a fixed order
		field := fmt.Sprintf("tiers[%q]", name)
		if name == "" {
			return config{}, nil, fmt.Errorf("%w: %s: the default tier is the limiter's own policies", ErrConfig, field)
		}
		t, err := newTier(field, cfg.tiers[name])
		if err != nil {
			return config{}, nil, err
		}
		if tab, err = tab.with(name, t); err != nil {
			return config{}, nil, err
		}
	}
	cfg.scale = newScale(max(tab.longest, int64(cfg.maxWindow)), int64(cfg.resolution))
	for _, t := range tab.byID {
		cfg.calendars = cfg.calendars || t.cals != 0
		if err := checkCoarse(cfg.coarse, t); err != nil {
			return config{}, nil, err
		}
		if err := t.setup(cfg.scale, cfg.algorithm, cfg.base.UnixNano()); err != nil {
			return config{}, nil, err
		}
	}
	if !cfg.janitorSet {
		cfg.janitorInterval = min(max(time.Duration(def.longest), time.Second), time.Minute)
		if def.cals != 0 {
			cfg.janitorInterval = time.Minute // a period is a day or more
		}
	}
	return cfg, tab, nil
}
