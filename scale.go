package keyrate

import (
	"math"
	"math/bits"
	"time"
)

// scale is how a limiter's logs write instants as 32-bit ticks, the same
// for every tier and fixed for the limiter's life. An exact log counts in
// the finest tick of 1, 2 or 5 times a power of ten nanoseconds in which
// the longest window the limiter may hold spans fewer than maxTicks: 5ns
// for a 10s window, 50ns for a minute, 2µs for an hour, 50µs for a day.
// Every whole millisecond is then a whole tick. Under WithResolution a tick
// is the resolution.
//
// A log drops all its entries once the newest has left the longest window,
// so every entry it holds is less than two longest windows older than the
// instant it is read at: under 2^32 ticks, also when a key moves between
// tiers, as no tier's window may span more ticks than that. Ticks are
// therefore kept modulo 2^32 and read back by their age against the tick of
// that instant.
//
// An instant becomes the tick that contains it rounded up, the end of its
// tick: an event may count as up to one tick later than it happened, never
// earlier, so no window of the real instants ever holds more than the limit.
type scale struct {
	unit  int64 // nanoseconds per tick
	magic uint64
	shift uint8 // see quo
	res   bool  // the tick is WithResolution's: every log is wide
}

// maxTicks bounds the ticks a window may span (see scale).
const maxTicks = 1<<31 - 2

// newScale returns the scale of a limiter whose longest window is longest
// nanoseconds, for WithResolution's res (0: off).
func newScale(longest, res int64) scale {
	if res > 0 {
		s := scaleOf(res)
		s.res = true
		return s
	}
	step := uint8(0)
	for longest/unitOf(step) >= maxTicks {
		step++
	}
	return scaleOf(unitOf(step))
}

// holds reports whether a window of w nanoseconds spans few enough ticks.
func (s *scale) holds(w int64) bool { return w/s.unit < maxTicks }

// span returns the longest window the scale holds.
func (s *scale) span() time.Duration {
	if s.unit > math.MaxInt64/maxTicks {
		return math.MaxInt64
	}
	return time.Duration(maxTicks*s.unit - 1)
}

// unitOf returns the tick of a step of the series 1, 2, 5, 10, 20, 50, ...
// nanoseconds.
func unitOf(step uint8) int64 {
	unit := []int64{1, 2, 5}[step%3]
	for range step / 3 {
		unit *= 10
	}
	return unit
}

func scaleOf(unit int64) scale {
	s := scale{unit: unit}
	if unit&(unit-1) == 0 {
		s.shift = uint8(bits.TrailingZeros64(uint64(unit)))
		return s
	}
	// Division by a constant as a multiplication (Granlund and Montgomery,
	// 1994, theorem 4.2): with l = ceil(log2 unit) and magic =
	// ceil(2^(62+l)/unit) < 2^63+1, n/unit is the high word of n*magic
	// shifted right by l-2, for every 0 <= n < 2^62. It takes 2.3ns against
	// 5.3ns for a DIV on the machines benchmarked here (go test -bench,
	// a chain of dependent divisions), and a decision makes two.
	l := uint(bits.Len64(uint64(unit) - 1))
	q, r := bits.Div64(1<<(l-2), 0, uint64(unit))
	if r != 0 {
		q++
	}
	s.magic, s.shift = q, uint8(l-2)
	return s
}

// quo returns n / unit for 0 <= n < 2^62.
func (s *scale) quo(n int64) int64 {
	if s.magic == 0 {
		return n >> s.shift
	}
	hi, _ := bits.Mul64(uint64(n), s.magic)
	return int64(hi >> s.shift)
}

// ceil returns the tick that ends at or after instant t >= 0.
func (s *scale) ceil(t int64) int64 { return s.quo(t + s.unit - 1) }

// floor returns the tick that ends at or before instant t.
func (s *scale) floor(t int64) int64 {
	if t < 0 {
		return -s.ceil(-t)
	}
	return s.quo(t)
}

// instant returns the instant tick k ends at.
func (s *scale) instant(k int64) int64 { return k * s.unit }

// windowAge returns, for the window (now-w, now] at reference tick r =
// s.ceil(now), the bound below which an entry's age puts it inside. It is
// at least 1, so entries of now's own tick never leave, even under a tier
// of calendar policies alone (w = 0): a refund finds its entry by tick, and
// had the entry gone, a later one of that tick would take the refund.
func windowAge(now, w, r int64, s *scale) uint32 {
	return uint32(max(r-s.floor(now-w), 1)) // at most 2^31: see scale
}

// ageBound is windowAge(now, w, r, s) for a window of k whole ticks, or of
// any length when k is 0.
func ageBound(now, w, r int64, k uint32, s *scale) uint32 {
	if k == 0 {
		return windowAge(now, w, r, s)
	}
	if s.instant(r) != now {
		k++ // now is inside tick r: floor(now) is r-1
	}
	return k
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv is a/b rounded towards minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
