package benchmarks

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/httprate"
	"github.com/keyrate/keyrate"
	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// funcClock adapts Config.Now to keyrate.Clock.
type funcClock func() time.Time

func (f funcClock) Now() time.Time { return f() }

// keyrate ---------------------------------------------------------------

type keyrateAdapter struct{ l *keyrate.Limiter }

func newKeyrate(c Config) (Limiter, error) { return newKeyrateWith(c) }

// newKeyrateCoarse reads the system clock once per CoarseResolution on a
// background goroutine. It cannot take Config.Now: keyrate refuses to
// combine a coarse clock with WithClock, and New then returns that error.
func newKeyrateCoarse(c Config) (Limiter, error) {
	return newKeyrateWith(c, keyrate.WithCoarseClock(CoarseResolution))
}

// newKeyrateAlgorithm returns the constructor of keyrate with algorithm a.
func newKeyrateAlgorithm(a keyrate.Algorithm) func(Config) (Limiter, error) {
	return func(c Config) (Limiter, error) { return newKeyrateWith(c, keyrate.WithAlgorithm(a)) }
}

func newKeyrateResolution(c Config) (Limiter, error) {
	return newKeyrateWith(c, keyrate.WithResolution(LogResolution))
}

func newKeyrateWith(c Config, opts ...keyrate.Option) (Limiter, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	l, err := keyrate.New(c.Limit, c.Window, keyrateOptions(c, opts)...)
	if err != nil {
		return nil, err
	}
	return keyrateAdapter{l}, nil
}

// The NewPolicies of keyrate's configurations: c's clock and sweep, its
// Limit and Window unused.

func newKeyratePolicies(c Config, ps []keyrate.Policy) (Limiter, error) {
	return newKeyratePoliciesWith(c, ps)
}

func newKeyratePoliciesAlgorithm(a keyrate.Algorithm) func(Config, []keyrate.Policy) (Limiter, error) {
	return func(c Config, ps []keyrate.Policy) (Limiter, error) {
		return newKeyratePoliciesWith(c, ps, keyrate.WithAlgorithm(a))
	}
}

func newKeyratePoliciesResolution(c Config, ps []keyrate.Policy) (Limiter, error) {
	return newKeyratePoliciesWith(c, ps, keyrate.WithResolution(LogResolution))
}

func newKeyratePoliciesWith(c Config, ps []keyrate.Policy, opts ...keyrate.Option) (Limiter, error) {
	if c.Sweep < 0 && c.Sweep != NoSweep {
		return nil, errors.New("benchmarks: negative sweep interval")
	}
	l, err := keyrate.NewPolicies(ps, keyrateOptions(c, opts)...)
	if err != nil {
		return nil, err
	}
	return keyrateAdapter{l}, nil
}

// keyrateOptions adds c's clock and sweep interval to opts.
func keyrateOptions(c Config, opts []keyrate.Option) []keyrate.Option {
	if c.Now != nil {
		opts = append(opts, keyrate.WithClock(funcClock(c.Now)))
	}
	switch {
	case c.Sweep > 0:
		opts = append(opts, keyrate.WithJanitorInterval(c.Sweep))
	case c.Sweep == NoSweep:
		opts = append(opts, keyrate.WithJanitorInterval(0))
	}
	return opts
}

func (a keyrateAdapter) Allow(key string) bool         { return a.l.Allow(key) }
func (a keyrateAdapter) AllowN(key string, n int) bool { return a.l.AllowN(key, n) }
func (a keyrateAdapter) Exhaust(key string)            { a.l.AllowN(key, a.l.Policies()[0].Limit) }
func (a keyrateAdapter) Close()                        { a.l.Close() }

// Len exposes the number of tracked keys, for the memory measurement.
func (a keyrateAdapter) Len() int { return a.l.Len() }

// golang.org/x/time/rate in a sync.Map --------------------------------------

type xrateAdapter struct {
	keys  sync.Map // string -> *rate.Limiter
	every rate.Limit
	burst int
	now   func() time.Time
}

func newXRate(c Config) (Limiter, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &xrateAdapter{
		every: rate.Every(c.Window / time.Duration(c.Limit)),
		burst: c.Limit,
		now:   c.Now,
	}, nil
}

func (a *xrateAdapter) get(key string) *rate.Limiter {
	if v, ok := a.keys.Load(key); ok {
		return v.(*rate.Limiter)
	}
	v, _ := a.keys.LoadOrStore(key, rate.NewLimiter(a.every, a.burst))
	return v.(*rate.Limiter)
}

func (a *xrateAdapter) Allow(key string) bool {
	if a.now == nil {
		return a.get(key).Allow()
	}
	return a.get(key).AllowN(a.now(), 1)
}

// AllowN takes n tokens at once. x/time/rate refuses n above its burst.
func (a *xrateAdapter) AllowN(key string, n int) bool {
	now := time.Now()
	if a.now != nil {
		now = a.now()
	}
	return a.get(key).AllowN(now, n)
}

func (a *xrateAdapter) Exhaust(key string) {
	now := time.Now()
	if a.now != nil {
		now = a.now()
	}
	l := a.get(key)
	l.ReserveN(now, a.burst) // the whole burst
	l.ReserveN(now, a.burst) // and one window of refill in deficit
}

func (a *xrateAdapter) Close() {}

// github.com/sethvargo/go-limiter memorystore -------------------------------

type goLimiterAdapter struct {
	store golimiter.Store
	limit int
}

func newGoLimiter(c Config) (Limiter, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	cfg := &memorystore.Config{Tokens: uint64(c.Limit), Interval: c.Window}
	if c.Sweep > 0 {
		// Idle for one window is idle: the budget is whole again.
		cfg.SweepInterval, cfg.SweepMinTTL = c.Sweep, c.Window
	}
	s, err := memorystore.New(cfg)
	if err != nil {
		return nil, err
	}
	return &goLimiterAdapter{store: s, limit: c.Limit}, nil
}

func (a *goLimiterAdapter) Allow(key string) bool {
	_, _, _, ok, err := a.store.Take(context.Background(), key)
	return ok && err == nil
}

// Exhaust takes the budget one event at a time: the store has no weighted
// take, and its budget only comes back on an interval tick.
func (a *goLimiterAdapter) Exhaust(key string) {
	for range a.limit {
		a.store.Take(context.Background(), key)
	}
}

func (a *goLimiterAdapter) Close() { a.store.Close(context.Background()) }

// github.com/ulule/limiter/v3 memory store ----------------------------------

type ululeAdapter struct {
	l     *ulule.Limiter
	limit int
}

func newUlule(c Config) (Limiter, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	sweep := c.Sweep
	switch sweep {
	case 0:
		sweep = ulule.DefaultCleanUpInterval
	case NoSweep:
		sweep = 0 // the store then starts no cleaner
	}
	store := ululememory.NewStoreWithOptions(ulule.StoreOptions{
		Prefix:          ulule.DefaultPrefix,
		CleanUpInterval: sweep,
	})
	rate := ulule.Rate{Period: c.Window, Limit: int64(c.Limit)}
	return &ululeAdapter{l: ulule.New(store, rate), limit: c.Limit}, nil
}

func (a *ululeAdapter) Allow(key string) bool {
	ctx, err := a.l.Get(context.Background(), key)
	return err == nil && !ctx.Reached
}

// AllowN counts n at once: Increment adds its count to the window's.
func (a *ululeAdapter) AllowN(key string, n int) bool {
	ctx, err := a.l.Increment(context.Background(), key, int64(n))
	return err == nil && !ctx.Reached
}

func (a *ululeAdapter) Exhaust(key string) {
	a.l.Increment(context.Background(), key, int64(a.limit))
}

// Close does nothing: the store's cleaner stops only when the store is
// garbage collected (it uses a finalizer).
func (a *ululeAdapter) Close() {}

// github.com/throttled/throttled/v2 GCRA over memstore ----------------------

type throttledAdapter struct {
	errs   atomic.Int64
	store  *memstore.MemStore
	rl     *throttled.GCRARateLimiterCtx
	limit  int
	window time.Duration
}

func newThrottled(c Config) (Limiter, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	store, err := memstore.New(0)
	if err != nil {
		return nil, err
	}
	if c.Now != nil {
		store.SetTimeNow(c.Now)
	}
	// throttled admits MaxBurst+1 events at once.
	quota := throttled.RateQuota{MaxRate: throttled.PerDuration(c.Limit, c.Window), MaxBurst: c.Limit - 1}
	rl, err := throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(store), quota)
	if err != nil {
		return nil, err
	}
	return &throttledAdapter{store: store, rl: rl, limit: c.Limit, window: c.Window}, nil
}

// Allow counts an error as a refusal, and counts it: under contention on one
// key the store's compare-and-swap can fail ten times in a row, and then
// RateLimitCtx gives up with an error instead of a decision.
func (a *throttledAdapter) Allow(key string) bool {
	limited, _, err := a.rl.RateLimitCtx(context.Background(), key, 1)
	if err != nil {
		a.errs.Add(1)
		return false
	}
	return !limited
}

// AllowN takes a quantity of n in one call.
func (a *throttledAdapter) AllowN(key string, n int) bool {
	limited, _, err := a.rl.RateLimitCtx(context.Background(), key, n)
	if err != nil {
		a.errs.Add(1)
		return false
	}
	return !limited
}

// Errors returns how many calls ended in an error instead of a decision.
func (a *throttledAdapter) Errors() int64 { return a.errs.Load() }

// Exhaust spends the burst with one weighted call, then moves the key's
// theoretical arrival time one window later through the store's own
// compare-and-swap: a window of refill in deficit.
func (a *throttledAdapter) Exhaust(key string) {
	a.rl.RateLimitCtx(context.Background(), key, a.limit)
	for range 10 {
		tat, _, err := a.store.GetWithTime(key)
		if err != nil || tat < 0 {
			return
		}
		if ok, _ := a.store.CompareAndSwapWithTTL(key, tat, tat+int64(a.window), 0); ok {
			return
		}
	}
}

func (a *throttledAdapter) Close() {}

// github.com/go-chi/httprate, its in-memory limiter without HTTP ------------

// discardWriter is the smallest http.ResponseWriter: OnLimit writes no
// headers to it (they are all switched off), and nothing is ever sent.
type discardWriter struct{ h http.Header }

func (w discardWriter) Header() http.Header         { return w.h }
func (w discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w discardWriter) WriteHeader(int)             {}

type httprateAdapter struct {
	rl       *httprate.RateLimiter
	w        discardWriter
	req      *http.Request // built once; OnLimit reads only its context
	spendReq *http.Request // carries an increment of the whole limit
}

func newHTTPRate(c Config) (Limiter, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	rl := httprate.NewRateLimiter(c.Limit, c.Window, httprate.WithResponseHeaders(httprate.ResponseHeaders{}))
	req, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		return nil, err
	}
	spend := req.WithContext(httprate.WithIncrement(req.Context(), c.Limit))
	return &httprateAdapter{rl: rl, w: discardWriter{h: http.Header{}}, req: req, spendReq: spend}, nil
}

// Allow asks OnLimit, httprate's atomic check-and-count; it reports true
// when the request must be halted.
func (a *httprateAdapter) Allow(key string) bool { return !a.rl.OnLimit(a.w, a.req, key) }
func (a *httprateAdapter) Exhaust(key string)    { a.rl.OnLimit(a.w, a.spendReq, key) }

// AllowN counts n at once, through the increment a request's context
// carries; it costs the context an allocation per call.
func (a *httprateAdapter) AllowN(key string, n int) bool {
	return !a.rl.OnLimit(a.w, a.req.WithContext(httprate.WithIncrement(a.req.Context(), n)), key)
}
func (a *httprateAdapter) Close() {}
