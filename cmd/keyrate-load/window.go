package main

import (
	"slices"
	"time"
)

// Span is when a request could have been decided: from the moment it was
// sent until its reply arrived. A client cannot see the server's instant of
// decision, only that it lies within this span.
type Span struct {
	Start, End time.Time
}

// MostWithin returns the largest number of spans that fit together inside
// one half-open interval of length window, [from, from+window), and the
// earliest such from. A set of spans fits when its latest End is less than
// window after its earliest Start.
//
// Applied to admitted requests this is a lower bound on the most the server
// admitted within any window: if n spans fit inside one interval, so do the
// n decisions made during them. So a result above the limit proves an
// excess, and under a short round trip the bound is tight. For point events
// (Start == End) it is exactly the most events in any [t, t+window).
// O(n log n); a span whose End is before its Start counts as a point at
// Start, and window <= 0 gives 0.
func MostWithin(spans []Span, window time.Duration) (n int, from time.Time) {
	if len(spans) == 0 || window <= 0 {
		return 0, time.Time{}
	}
	s := slices.Clone(spans)
	for i := range s {
		if s[i].End.Before(s[i].Start) {
			s[i].End = s[i].Start
		}
	}
	slices.SortFunc(s, func(a, b Span) int { return a.Start.Compare(b.Start) })

	// For each start t (taken from its first occurrence), count the spans
	// starting at or after t that end before t+window. Walking the starts
	// from the latest down, those spans are exactly the ones seen so far;
	// a Fenwick tree over the ranks of their ends counts the ones that end
	// early enough.
	ends := make([]time.Time, len(s))
	for i := range s {
		ends[i] = s[i].End
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	tree := make([]int, len(s)+1)
	add := func(end time.Time) {
		i, _ := slices.BinarySearchFunc(ends, end, func(a, b time.Time) int { return a.Compare(b) })
		for i++; i < len(tree); i += i & -i {
			tree[i]++
		}
	}
	endingBefore := func(bound time.Time) int {
		i, _ := slices.BinarySearchFunc(ends, bound, func(a, b time.Time) int { return a.Compare(b) })
		c := 0
		for ; i > 0; i -= i & -i {
			c += tree[i]
		}
		return c
	}
	for i := len(s) - 1; i >= 0; i-- {
		add(s[i].End)
		if i > 0 && s[i-1].Start.Equal(s[i].Start) {
			continue // count from the first span with this start
		}
		if c := endingBefore(s[i].Start.Add(window)); c > 0 && c >= n {
			n, from = c, s[i].Start
		}
	}
	return n, from
}
