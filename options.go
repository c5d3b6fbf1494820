package keyrate

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Option configures a Limiter; pass options to New.
type Option func(*config)

type config struct {
	clock           Clock
	coarse          time.Duration
	janitorInterval time.Duration
	janitorSet      bool
	maxKeys         int
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
// shorter than the window, and the option cannot be combined with WithClock.
func WithCoarseClock(resolution time.Duration) Option {
	return func(cfg *config) { cfg.coarse = resolution }
}

// WithJanitorInterval sets how often a background goroutine sweeps the map
// for idle keys (keys with no event left in the window) and evicts them, and
// shrinks the rings of keys that have gone quiet.
//
// Default: the window, kept within [1s, 1m]. A shorter interval returns
// memory sooner and costs a walk over every tracked key per sweep; a longer
// one holds idle keys for up to one interval past their last event's window.
// Zero disables the janitor: memory then grows with every distinct key ever
// seen until Reset, so combine it with WithMaxKeys or use it only with a
// closed set of keys. Negative values are an error.
func WithJanitorInterval(d time.Duration) Option {
	return func(cfg *config) { cfg.janitorInterval, cfg.janitorSet = d, true }
}

// WithMaxKeys bounds the number of keys the limiter tracks at once. Once n
// keys are tracked, a request for a key that is not tracked is refused (fail
// closed): Take returns a Decision with Allowed false and Overflow true, and
// nothing is stored. Tracked keys are decided as usual, and room comes back as
// the janitor evicts idle keys.
//
// This is the defence against key floods: random API keys or spoofed
// addresses cannot grow the limiter's memory past about n keys' worth. Size n
// above the number of clients active within one window, or legitimate new
// clients are refused during a flood. Default: 0, no bound. Negative values
// are an error.
func WithMaxKeys(n int) Option {
	return func(cfg *config) { cfg.maxKeys = n }
}

// ErrConfig is wrapped by every error New returns for an invalid argument or
// option, so callers can test for it with errors.Is.
var ErrConfig = errors.New("keyrate: invalid configuration")

func newConfig(limit int, window time.Duration, opts []Option) (config, error) {
	if limit < 1 || limit > math.MaxInt32 {
		return config{}, fmt.Errorf("%w: limit is %d, want 1 to %d", ErrConfig, limit, math.MaxInt32)
	}
	if window <= 0 {
		return config{}, fmt.Errorf("%w: window is %v, want > 0", ErrConfig, window)
	}
	cfg := config{clock: systemClock{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.clock == nil:
		return config{}, fmt.Errorf("%w: clock is nil", ErrConfig)
	case cfg.coarse < 0 || cfg.coarse >= window && cfg.coarse != 0:
		return config{}, fmt.Errorf("%w: coarse clock resolution is %v, want > 0 and < the window %v", ErrConfig, cfg.coarse, window)
	case cfg.coarse > 0 && cfg.clock != (systemClock{}):
		return config{}, fmt.Errorf("%w: coarse clock cannot be combined with WithClock", ErrConfig)
	case cfg.janitorInterval < 0:
		return config{}, fmt.Errorf("%w: janitor interval is %v, want >= 0", ErrConfig, cfg.janitorInterval)
	case cfg.maxKeys < 0:
		return config{}, fmt.Errorf("%w: max keys is %d, want >= 0", ErrConfig, cfg.maxKeys)
	}
	if !cfg.janitorSet {
		cfg.janitorInterval = min(max(window, time.Second), time.Minute)
	}
	return cfg, nil
}
