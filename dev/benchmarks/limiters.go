// Package benchmarks measures keyrate side by side with other per-key rate
// limiters for Go: throughput on the same workloads, memory per tracked key,
// accuracy at window boundaries and under overload, and the latency callers
// see while idle keys are swept; and keyrate's httplimit side by side with
// other net/http rate limiting middleware (HTTPPeers).
//
// Every limiter sits behind one small adapter (Limiter) configured to the
// same budget, so each workload runs the same code against each of them. It
// lives in the development module so that the peers never enter keyrate's go.mod.
// run.sh runs everything and writes RESULTS.md (build.sh, measure.sh and
// report.sh do it in parts, the measuring on another machine if need be);
// README.md explains what each number means.
package benchmarks

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/keyrate/keyrate"
)

// Limiter is the one decision every adapter offers: admit or refuse one
// event for a key, now.
type Limiter interface {
	// Allow reports whether one event for key is admitted now, recording it
	// if so.
	Allow(key string) bool
	// Exhaust spends key's whole budget, so that the next Allow for key is
	// refused. Limiters whose budget refills continuously (token buckets,
	// GCRA) are also put one window into deficit through their public API,
	// so that a key touched rarely still stays refused for a benchmark's
	// length: the refusal path measured afterwards is the same one a freshly
	// spent key takes.
	Exhaust(key string)
	// Close releases background goroutines where the library allows it.
	Close()
}

// ErrorCounter is implemented by adapters whose library can answer a call
// with an error instead of a decision. Allow counts such a call as refused.
type ErrorCounter interface {
	Errors() int64
}

// Config is the budget every adapter is built with: Limit events per
// Window per key. Token buckets get a burst of Limit and a refill of Limit
// per Window.
type Config struct {
	Limit  int
	Window time.Duration
	// Now, when set, replaces the system clock for limiters that accept a
	// clock (see Peer.Clock); others ignore it.
	Now func() time.Time
	// Sweep is how often a limiter with a background sweeper looks for idle
	// keys (go-limiter then treats a key idle for one Window as idle). Zero
	// keeps the library's default; NoSweep turns the sweeper off where the
	// library allows it (keyrate, ulule).
	Sweep time.Duration
}

// NoSweep in Config.Sweep turns background sweeping off where possible.
const NoSweep time.Duration = -1

func (c Config) validate() error {
	if c.Limit < 1 || c.Window <= 0 {
		return fmt.Errorf("benchmarks: need limit >= 1 and window > 0, got %d per %v", c.Limit, c.Window)
	}
	if c.Sweep < 0 && c.Sweep != NoSweep {
		return errors.New("benchmarks: negative sweep interval")
	}
	return nil
}

// Peer describes one limiter under test.
type Peer struct {
	// Name is the short name used in benchmark names and tables.
	Name string
	// Module is the Go module (and version) measured.
	Module string
	// Algorithm is how the limiter counts.
	Algorithm string
	// Sweeper says how idle keys leave memory.
	Sweeper string
	// Clock reports whether New honours Config.Now.
	Clock bool
	// Resolution is the coarse clock's resolution for a keyrate
	// configuration that reads its clock once per Resolution
	// (keyrate.WithCoarseClock); zero when every call reads the clock.
	Resolution time.Duration
	// Aligned reports windows that start at whole multiples of their length
	// since the Unix epoch (keyrate's FixedWindow): a key's spent budget
	// comes back whole at the next boundary, whenever it was spent, so a
	// deny benchmark first waits until no boundary falls within
	// AlignedMargin.
	Aligned bool
	// Refills reports a budget that comes back continuously and that no
	// call of the library's public API can put into deficit (keyrate's
	// GCRA: a request takes at most the tokens the bucket holds). Exhaust
	// then keeps a key refused for one refill interval only (Window/Limit,
	// 600 ms at 100 per minute), and the deny workload that calls a key
	// less often than that, serial-1m, is left out for it.
	Refills bool
	// New builds the limiter.
	New func(Config) (Limiter, error)
	// NewPolicies builds one limiter under several policies decided
	// together, for the configurations that have one (keyrate's:
	// keyrate.NewPolicies). Nil for the peers, which have none: Stack gives
	// them one limiter per policy.
	NewPolicies func(Config, []keyrate.Policy) (Limiter, error)
}

// CoarseResolution is the clock resolution of the keyrate-coarse
// configuration.
const CoarseResolution = time.Millisecond

// LogResolution is the WithResolution of the keyrate-1m configuration,
// which the memory table measures (see KeyrateResolution).
const LogResolution = time.Minute

// AlignedMargin is how far a deny benchmark of an Aligned limiter must be
// from its window's next boundary when it starts: well over what one run of
// a benchmark function takes at the default -benchtime, setup included (a
// few seconds at most).
const AlignedMargin = 10 * time.Second

// Peers lists keyrate's own configurations first (the default, which reads
// the clock on every call; keyrate-coarse, with
// keyrate.WithCoarseClock(CoarseResolution); keyrate-fixed and keyrate-gcra,
// its other algorithms), then the five peers, in a fixed order. The tables
// call every entry a limiter; only the five after keyrate's own are the
// peers it is compared with.
var Peers = []Peer{
	{
		Name:        "keyrate",
		Module:      "github.com/keyrate/keyrate",
		Algorithm:   "exact sliding log",
		Sweeper:     "janitor goroutine, one key locked at a time",
		Clock:       true,
		New:         newKeyrate,
		NewPolicies: newKeyratePolicies,
	},
	{
		Name:       "keyrate-coarse",
		Module:     "github.com/keyrate/keyrate, WithCoarseClock(1ms)",
		Algorithm:  "exact sliding log, coarse clock",
		Sweeper:    "janitor goroutine, one key locked at a time",
		Resolution: CoarseResolution,
		New:        newKeyrateCoarse,
	},
	{
		Name:        "keyrate-fixed",
		Module:      "github.com/keyrate/keyrate, WithAlgorithm(FixedWindow)",
		Algorithm:   "fixed window (calendar windows)",
		Sweeper:     "janitor goroutine, one key locked at a time",
		Clock:       true,
		Aligned:     true,
		New:         newKeyrateAlgorithm(keyrate.FixedWindow),
		NewPolicies: newKeyratePoliciesAlgorithm(keyrate.FixedWindow),
	},
	{
		Name:        "keyrate-gcra",
		Module:      "github.com/keyrate/keyrate, WithAlgorithm(GCRA)",
		Algorithm:   "GCRA (token bucket)",
		Sweeper:     "janitor goroutine, one key locked at a time",
		Clock:       true,
		Refills:     true,
		New:         newKeyrateAlgorithm(keyrate.GCRA),
		NewPolicies: newKeyratePoliciesAlgorithm(keyrate.GCRA),
	},
	{
		Name:      "xrate",
		Module:    "golang.org/x/time/rate v0.16.0 + sync.Map",
		Algorithm: "token bucket",
		Sweeper:   "none: keys stay forever",
		Clock:     true,
		New:       newXRate,
	},
	{
		Name:      "golimiter",
		Module:    "github.com/sethvargo/go-limiter v0.7.1 memorystore",
		Algorithm: "fixed window per key (refill on interval ticks)",
		Sweeper:   "goroutine holding the whole-map lock",
		New:       newGoLimiter,
	},
	{
		Name:      "ulule",
		Module:    "github.com/ulule/limiter/v3 v3.11.2 memory store",
		Algorithm: "fixed window per key (from its first event)",
		Sweeper:   "cleaner goroutine over a sync.Map",
		New:       newUlule,
	},
	{
		Name:      "throttled",
		Module:    "github.com/throttled/throttled/v2 v2.15.0 memstore",
		Algorithm: "GCRA (token bucket)",
		Sweeper:   "none without an LRU bound: keys stay forever",
		Clock:     true,
		New:       newThrottled,
	},
	{
		Name:      "httprate",
		Module:    "github.com/go-chi/httprate v0.16.1 local counter",
		Algorithm: "sliding window counter (two fixed windows, weighted)",
		Sweeper:   "inline: the first call of a new window clears the older map",
		New:       newHTTPRate,
	},
}

// KeyrateResolution is keyrate with WithResolution(LogResolution): events
// of the same minute share one entry of a key's log, so that its memory is
// bounded by its windows instead of its limits. Only the memory table
// measures it (MemoryPeers).
var KeyrateResolution = Peer{
	Name:        "keyrate-1m",
	Module:      "github.com/keyrate/keyrate, WithResolution(time.Minute)",
	Algorithm:   "sliding log of (minute, count) entries",
	Sweeper:     "janitor goroutine, one key locked at a time",
	Clock:       true,
	New:         newKeyrateResolution,
	NewPolicies: newKeyratePoliciesResolution,
}

// MemoryPeers lists the limiters of the memory table at the full limit
// (MemoryCases): keyrate, KeyrateResolution, keyrate's other algorithms,
// then the five peers. keyrate-coarse is left out: its logs are keyrate's,
// and it cannot take the virtual clock that fills them.
func MemoryPeers() []Peer {
	var out []Peer
	for _, p := range Peers {
		switch p.Name {
		case "keyrate-coarse":
			continue
		case "keyrate-fixed":
			out = append(out, KeyrateResolution)
		}
		out = append(out, p)
	}
	return out
}

// PeerByName returns the limiter called name, from Peers or
// KeyrateResolution.
func PeerByName(name string) (Peer, bool) {
	for _, p := range append(slices.Clip(Peers), KeyrateResolution) {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}
