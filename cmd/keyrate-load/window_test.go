package main

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func points(ds ...time.Duration) []Span {
	out := make([]Span, len(ds))
	for i, d := range ds {
		out[i] = Span{at(d), at(d)}
	}
	return out
}

func repeat(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

const s = time.Second

func TestMostWithinSyntheticTimelines(t *testing.T) {
	cases := []struct {
		name     string
		spans    []Span
		window   time.Duration
		wantN    int
		wantFrom time.Duration
	}{
		{"none", nil, 10 * s, 0, -1},
		{"one", points(3 * s), 10 * s, 1, 3 * s},
		{"zero window", points(1*s, 2*s), 0, 0, -1},
		// A sliding window of 5 per 10 s under steady load: 5 at the start,
		// then one each time an old one leaves.
		{"held exactly", points(0, 100*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond, 400*time.Millisecond,
			10*s, 10*s+100*time.Millisecond, 10*s+200*time.Millisecond, 10*s+300*time.Millisecond, 10*s+400*time.Millisecond),
			10 * s, 5, 0},
		// The fixed-window boundary burst: 10 at 00:09 and 10 at 00:11.
		{"boundary burst", points(append(repeat(10, 9*s), repeat(10, 11*s)...)...), 10 * s, 20, 9 * s},
		{"boundary burst, short window", points(append(repeat(10, 9*s), repeat(10, 11*s)...)...), 2 * s, 10, 9 * s},
		// The interval is half-open: events exactly one window apart never
		// share one, events a nanosecond closer do.
		{"exactly a window apart", points(0, 10*s, 20*s), 10 * s, 1, 0},
		{"just inside a window", points(0, 10*s-1), 10 * s, 2, 0},
		{"ties at one instant", points(5*s, 5*s, 5*s, 15*s), 10 * s, 3, 5 * s},
		{"densest later", points(0, 20*s, 21*s, 22*s, 29*s), 10 * s, 4, 20 * s},
		// With replies, a decision lies anywhere in its span: a request
		// sent 9.8 s after another but answered at 10.2 s may have been
		// decided after the first left the window, so they need not share
		// one.
		{"spans that cannot share a window",
			[]Span{{at(0), at(500 * time.Millisecond)}, {at(9800 * time.Millisecond), at(10200 * time.Millisecond)}}, 10 * s, 1, 0},
		{"spans that must",
			[]Span{{at(0), at(500 * time.Millisecond)}, {at(9 * s), at(9500 * time.Millisecond)}}, 10 * s, 2, 0},
		{"reply before send is a point",
			[]Span{{at(5 * s), at(0)}, {at(6 * s), at(6 * s)}}, 10 * s, 2, 5 * s},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, from := MostWithin(c.spans, c.window)
			wantFrom := time.Time{}
			if c.wantFrom >= 0 {
				wantFrom = at(c.wantFrom)
			}
			if n != c.wantN || !from.Equal(wantFrom) {
				t.Errorf("MostWithin = %d from %v, want %d from %v", n, from.Sub(t0), c.wantN, c.wantFrom)
			}
		})
	}
}

// mostWithinByHand checks every start, counting the spans that fit: the
// definition, at O(n²).
func mostWithinByHand(spans []Span, window time.Duration) (int, time.Time) {
	best, from := 0, time.Time{}
	for _, a := range spans {
		c := 0
		for _, b := range spans {
			end := b.End
			if end.Before(b.Start) {
				end = b.Start
			}
			if !b.Start.Before(a.Start) && end.Sub(a.Start) < window {
				c++
			}
		}
		if c > best || c == best && c > 0 && a.Start.Before(from) {
			best, from = c, a.Start
		}
	}
	return best, from
}

func TestMostWithinMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		n := rng.IntN(40)
		spans := make([]Span, n)
		for i := range spans {
			// Coarse instants so that ties and exact window distances occur.
			start := at(time.Duration(rng.IntN(60)) * 250 * time.Millisecond)
			spans[i] = Span{start, start.Add(time.Duration(rng.IntN(4)) * 250 * time.Millisecond)}
		}
		window := time.Duration(1+rng.IntN(12)) * 500 * time.Millisecond
		gotN, gotFrom := MostWithin(spans, window)
		wantN, wantFrom := mostWithinByHand(spans, window)
		if gotN != wantN || !gotFrom.Equal(wantFrom) {
			t.Fatalf("trial %d, window %v, spans %v: got %d from %v, want %d from %v",
				trial, window, spans, gotN, gotFrom, wantN, wantFrom)
		}
	}
}

func TestMostWithinLeavesInputAlone(t *testing.T) {
	spans := points(3*s, 1*s, 2*s)
	MostWithin(spans, 10*s)
	if !spans[0].Start.Equal(at(3 * s)) {
		t.Errorf("input reordered: %v", spans)
	}
}
