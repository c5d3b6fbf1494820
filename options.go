package keyrate

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Option configures a Limiter; pass options to New or NewPolicies.
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
}

// WithClock sets the clock the limiter reads. Default: the system clock,
// through its monotonic reading. Use a ManualClock in tests to pin instants.
// A clock that runs backwards never makes the limiter over-admit: each key is
// decided at the newest instant already seen for it.
func WithClock(c Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// WithCoarseClock trades precision for speed: instead of reading the system
// clock on every call, the limiter reads it once per resolution on a
// background goroutine and decides every call at that cached instant. A
// call then costs one atomic load for the time instead of a clock read,
// which is a large share of a decision on many machines.
//
// The cost is precision. An event is stamped up to resolution before it
// happened, so the limit holds exactly over the recorded instants but, in
// real time, over any span of window minus resolution: with 100 per minute
// and a 1ms resolution, no 59.999s span admits more than 100.
// RetryAfter and ResetAfter may run up to resolution long. The goroutine
// wakes once per resolution until Close.
//
// Default: off, every call reads the clock. resolution must be positive and
// shorter than every window (SetTier refuses a window it does not divide
// finely), and the option cannot be combined with WithClock.
func WithCoarseClock(resolution time.Duration) Option {
	return func(cfg *config) { cfg.coarse = resolution }
}

// WithResolution bounds every key's memory by its windows instead of its
// limits: events that fall in the same tick of d share one entry of the
// key's log (an instant and a count, 8 bytes), so a key holds at most
// longest window / d + 2 entries, whatever the limits. Without it, the log
// holds 4 bytes per event of weight 1 in the window, 8 per decision of a
// larger weight.
//
// Every event counts from the end of its tick, never earlier than it
// happened, so no window of the real instants ever holds more than the
// limit. The cost is on the other side: an event leaves its window up to d
// late, so a request may be refused up to d before it would fit, and
// RetryAfter, ResetAfter and RefillAfter may be up to d long.
//
// Bytes per key with every event of the limit held, spread over the window
// (the key's string and its map entry, about 110 bytes, included):
//
//	window  limit    d      bytes      refused early by at most
//	1m      100      -      520        50ns (the exact log's tick)
//	1h      1,000    -      4,220      2µs
//	1h      1,000    1m     620        1m
//	1d      100,000  -      401,500    50µs
//	1d      100,000  1m     12,400     1m
//	1d      100,000  1s     691,300    1s: more than without, as 86,402 ticks > 100,000/2
//
// It pays where the window holds fewer than half as many ticks of d as the
// limit has events. d must be positive, no longer than any policy's window
// (SetTier refuses a window shorter than d), and at least the longest
// window / (2^31-2), as a log counts its window in 32-bit ticks. Default:
// off, 4 bytes per event.
func WithResolution(d time.Duration) Option {
	return func(cfg *config) { cfg.resolution, cfg.resolutionSet = d, true }
}

// WithMaxWindow makes room for windows up to d in policies that SetTier
// sets later, beyond the longest window the limiter was made with. A
// limiter writes every event's instant in one tick for its whole life,
// chosen from its longest window (5ns for 10s, 50ns for a minute, 2µs for
// an hour, 50µs for a day), and SetTier refuses a window
// longer than that tick can count; a longer d gives a coarser tick, which
// moves refusals earlier by at most one tick. Default: the longest window
// of the limiter's policies and tiers. d must not be negative.
func WithMaxWindow(d time.Duration) Option {
	return func(cfg *config) { cfg.maxWindow = d }
}

// WithJanitorInterval sets how often a background goroutine sweeps the map
// for idle keys (keys with no event left in the window) and evicts them, and
// shrinks the rings of keys that have gone quiet.
//
// Default: the longest window of the limiter's policies (the default
// tier's), kept within [1s, 1m]. A shorter interval returns
// memory sooner and costs a walk over every tracked key per sweep; a longer
// one holds idle keys for up to one interval past their last event's window.
// Zero disables the janitor: memory then grows with every distinct key ever
// seen until Reset, so combine it with WithMaxKeys or use it only with a
// closed set of keys. Negative values are an error.
func WithJanitorInterval(d time.Duration) Option {
	return func(cfg *config) { cfg.janitorInterval, cfg.janitorSet = d, true }
}

// WithMaxKeys bounds the keys the limiter tracks: Len never exceeds n, so
// floods of random API keys or spoofed addresses cannot grow its memory past
// about n keys' worth, nor lock new clients out. Once n keys are tracked, a
// new key makes room: the n/16 keys decided least recently (at least one)
// are evicted, forgetting their events, and the new key is decided at once.
// Only keys idle longer than every key kept lose events, and get their limit
// back early: the price of a memory bound. Size n a sixteenth above the
// clients active within the longest window, and they have none left to lose.
// A client that mints keys can push its own idle key out, gaining nothing a
// new key's budget did not; bound the keys one address may mint where it
// matters.
//
// Making room walks the map once per n/16 new keys (10 to 25 ms at 100,000
// keys on 2 cores), during which new keys wait and tracked keys do not.
// WithRefuseNewKeys refuses new keys instead. Default: 0, no bound.
func WithMaxKeys(n int) Option {
	return func(cfg *config) { cfg.maxKeys = n }
}

// WithRefuseNewKeys makes a limiter at its WithMaxKeys bound refuse keys it
// does not track instead of making room for them (fail closed): Take returns
// a Decision with Allowed false and Overflow true, and nothing is stored.
// Tracked keys never lose their events early, but room comes back only as
// the janitor evicts idle keys, so a flood of new keys turns every new
// client away for up to the longest window. Use it where forgetting an idle
// key's events is worse than refusing new clients.
//
// Default: off, a full limiter makes room. Without WithMaxKeys it is an
// error.
func WithRefuseNewKeys() Option {
	return func(cfg *config) { cfg.refuseNewKeys = true }
}

// ErrConfig is wrapped by every error New, NewPolicies and SetTier return
// for an invalid argument or option, so callers can test for it with
// errors.Is. The error names the field at fault.
var ErrConfig = errors.New("keyrate: invalid configuration")

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
		if err := checkCoarse(cfg.coarse, t); err != nil {
			return config{}, nil, err
		}
		if err := t.setup(cfg.scale, cfg.algorithm, cfg.base.UnixNano()); err != nil {
			return config{}, nil, err
		}
	}
	if !cfg.janitorSet {
		cfg.janitorInterval = min(max(time.Duration(def.longest), time.Second), time.Minute)
	}
	return cfg, tab, nil
}

// checkCoarse refuses a tier with a window no longer than WithCoarseClock's
// resolution (0: off), which could not tell its window's edges apart.
func checkCoarse(resolution time.Duration, t *tier) error {
	if s := t.shortest(); resolution > 0 && resolution >= s {
		return fmt.Errorf("%w: coarse clock resolution is %v, want > 0 and < the window %v", ErrConfig, resolution, s)
	}
	return nil
}
