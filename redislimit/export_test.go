package redislimit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/clientkey"
	"github.com/redis/go-redis/v9"
)

// WithClock makes decisions at the clock's instants instead of the Redis
// server's TIME, so that the shared behavioural suite's manual clock drives
// this backend too. It exists only in this package's tests.
var WithClock = withClock

// Log is a key's sliding log as the script stores it (see slidinglog.go),
// decoded.
type Log struct {
	Len     int   // the string's length in bytes
	Tick    int64 // in microseconds
	Cap     int   // the ring's capacity in entries
	Base    uint32
	Last    int64 // the newest admission's instant, µs since the epoch
	Expires int64
	Entries []LogEntry // oldest first
	// Version is the layout's (1, or 2 with calendar counters), Counters
	// a log of version 2's non-empty calendar slots.
	Version  int
	Counters []CalendarCounter
}

// CalendarCounter is one calendar slot of a log of version 2: the
// calendar's id, the weight counted and the end of its period (µs).
type CalendarCounter struct {
	ID    uint32
	Count uint32
	End   int64
}

// CalendarID returns the id a log's counter names c by.
func CalendarID(c keyrate.Calendar) uint32 { return calendarID(c) }

// SetCalendarClock makes l compute its calendar boundaries around now()
// instead of the instant it gives the script, as a client whose clock is
// off from the server's does.
func SetCalendarClock(l *Limiter, now func() time.Time) { l.calNow = now }

// LogEntry is one entry of a Log: an instant in microseconds since the
// epoch, the weight admitted at it, and its running total.
type LogEntry struct {
	At     int64
	Weight int64
	Total  uint32
}

// Held returns the weight the log holds.
func (g Log) Held() int64 {
	var n int64
	for _, e := range g.Entries {
		n += e.Weight
	}
	return n
}

// The layout's sizes: the header, and the buffer of the newest entries
// after it.
const logHeader, logBuffer = 56, 4

// logCounters is the size of a log of version 2's calendar counters.
const logCounters = 64

// ReadLog reads and decodes the sliding log at Redis key k; a key that
// does not exist is an empty Log.
func ReadLog(ctx context.Context, c redis.UniversalClient, k string) (Log, error) {
	b, err := c.Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return Log{}, nil
	}
	if err != nil {
		return Log{}, err
	}
	ring := logHeader + 8*logBuffer
	if len(b) < ring || b[0] != 1 && b[0] != 2 || b[0] == 2 && len(b) < ring+logCounters {
		return Log{}, fmt.Errorf("log of %d bytes, version %d", len(b), b[0])
	}
	u := func(off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	f := func(off int) int64 { return int64(math.Float64frombits(binary.LittleEndian.Uint64(b[off:]))) }
	g := Log{Len: len(b), Tick: 1 << b[1], Cap: int(u(4)), Base: u(16), Expires: f(28), Last: f(48), Version: int(b[0])}
	head, rc, cnt, tn := int(u(8)), int(u(12)), int(u(36)), int64(u(44))
	if g.Version == 2 {
		for i := range 4 {
			p := ring + 16*i
			if id := u(p); id != 0 {
				g.Counters = append(g.Counters, CalendarCounter{ID: id, Count: u(p + 4), End: f(p + 8)})
			}
		}
		ring += logCounters
	}
	if len(b) != ring+8*g.Cap || head >= max(g.Cap, 1) || rc > g.Cap || cnt < rc || cnt > rc+logBuffer {
		return Log{}, fmt.Errorf("log of %d bytes: capacity %d, head %d, %d entries, %d in the ring", len(b), g.Cap, head, cnt, rc)
	}
	const m = 1 << 32
	lt := (g.Last + g.Tick - 1) / g.Tick
	newest := lt + ((tn-lt+m/2)%m+m)%m - m/2 // within 2^31 ticks of last, either side
	prev := g.Base
	for i := range cnt {
		p := logHeader + 8*(i-rc)
		if i < rc {
			p = ring + 8*((head+i)%g.Cap)
		}
		t, c := int64(u(p)), u(p+4)
		g.Entries = append(g.Entries, LogEntry{At: (newest - ((tn-t)%m+m)%m) * g.Tick, Weight: int64(c - prev), Total: c})
		prev = c
	}
	if cnt > 0 && (u(20) != g.Entries[0].Total || int64(u(24)) != (g.Entries[0].At/g.Tick)%m ||
		u(40) != g.Entries[cnt-1].Total || tn != (g.Entries[cnt-1].At/g.Tick)%m) {
		return Log{}, fmt.Errorf("header %x disagrees with the entries %+v", b[:logHeader], g.Entries)
	}
	return g, nil
}

// EventsStored returns the weight the sliding log at Redis key k holds:
// the number of events, when each weighs 1.
func EventsStored(ctx context.Context, c redis.UniversalClient, k string) (int64, error) {
	g, err := ReadLog(ctx, c, k)
	return g.Held(), err
}

// StoreKey returns the Redis key that holds key's state.
func (l *Limiter) StoreKey(key string) string {
	id := clientkey.Bound(key)
	return l.storeKey(id, l.tagOf(key, id))
}

// ReceiptGen returns the generation of the key's state that r names.
func ReceiptGen(r keyrate.Receipt) uint64 { return backend.ReceiptID(r) >> 48 }

// ReceiptRecorded returns the instant, in microseconds since the epoch,
// that the events r names were recorded at.
func ReceiptRecorded(r keyrate.Receipt) int64 {
	return backend.ReceiptAt(r).UnixMicro() + int64(backend.ReceiptID(r)&maxOffset)
}

// SendEachRequestAlone makes the Limiter send each request of a batch as
// a script run of its own, in one pipeline, instead of one run deciding
// many: the other way of sharing a round trip, which the benchmarks
// compare.
func SendEachRequestAlone(l *Limiter) { l.perRequest = true }

// SetMaxFlights sets how many round trips each batcher has in flight at
// once, for the benchmarks that compare them; it returns the previous.
func SetMaxFlights(n int) int {
	prev := maxFlights
	maxFlights = n
	return prev
}

// WithLeaseClock times a Limiter's leases on c instead of its decision
// clock, so that a test can step the server's clock back while the
// replicas' clocks, monotonic as real ones are, go on.
func WithLeaseClock(c keyrate.Clock) Option {
	return func(cfg *config) { cfg.leaseClock = func() int64 { return c.Now().UnixNano() } }
}

// SweepLeases runs l's lease sweep at its lease clock's instant: with a
// test's clock no sweeper runs by itself.
func SweepLeases(l *Limiter) { l.sweep(l.leaseNow()) }
