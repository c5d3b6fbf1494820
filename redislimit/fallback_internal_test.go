package redislimit

import (
	"context"
	"strings"
	"testing"
)

// scaleLimit rounds down, counts a share as written, and never gives 0.
func TestScaleLimit(t *testing.T) {
	for _, c := range []struct {
		limit int
		share float64
		want  int
	}{
		{10, 0.5, 5},
		{10, 1, 10},
		{100, 0.29, 29}, // 28.999999999999996 in floating point
		{10, 0.7, 7},
		{10, 1.0 / 3, 3},
		{3, 0.1, 1}, // 0.3, at least 1
		{1, 0.01, 1},
		{7, 0.5, 3},
		{1<<31 - 1, 1, 1<<31 - 1},
		{1<<31 - 1, 0.5, 1<<30 - 1},
	} {
		if got := scaleLimit(c.limit, c.share); got != c.want {
			t.Errorf("scaleLimit(%d, %v) = %d, want %d", c.limit, c.share, got, c.want)
		}
	}
}

// fallbackTier reads back the tier name fallbackKey puts in front of a
// key, whatever its bytes.
func TestFallbackKey(t *testing.T) {
	l := &Limiter{tierOf: func(key string) string { return key[:len(key)/2] }}
	tab := &tierTable{def: &tier{}, named: map[string]*tier{}}
	for _, name := range []string{"", "ab", "\x00\x01", strings.Repeat("x", 300)} {
		tab.named[name] = &tier{name: name}
	}
	l.tiers.Store(tab)
	for name := range tab.named {
		key := name + name // the tier function names the first half
		if got := fallbackTier(l.fallbackKey(l.tierFor(context.Background(), key), "id")); got != name {
			t.Errorf("tier %q read back as %q", name, got)
		}
	}
	if got := fallbackTier(l.fallbackKey(l.tierFor(context.Background(), "zzzz"), "id")); got != "" {
		t.Errorf("an unknown tier read back as %q, want the default", got)
	}
	for _, bad := range []string{"", "\x05ab", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"} {
		if got := fallbackTier(bad); got != "" {
			t.Errorf("fallbackTier(%q) = %q, want the default", bad, got)
		}
	}
}
