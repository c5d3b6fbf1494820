package ratelimitfield

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

func TestAppendPolicies(t *testing.T) {
	part := func(name string, limit int, window time.Duration) keyrate.PolicyDecision {
		return keyrate.PolicyDecision{Policy: keyrate.Policy{Name: name, Limit: limit, Window: window}}
	}
	for _, c := range []struct {
		name  string
		route string
		parts []keyrate.PolicyDecision
		unit  string
		want  string
	}{
		{"two policies", "", []keyrate.PolicyDecision{part("second", 10, time.Second), part("day", 1000, 24*time.Hour)}, "",
			`"second";q=10;w=1, "day";q=1000;w=86400`},
		{"under a route, with a unit", "upload", []keyrate.PolicyDecision{part("", 1000, time.Minute)}, "content-bytes",
			`"upload";q=1000;qu="content-bytes";w=60`},
		{"no whole-second window: no w", "", []keyrate.PolicyDecision{part("burst", 10, 500*time.Millisecond), part("", 20, 1500*time.Millisecond)}, "",
			`"burst";q=10, "default";q=20`},
		{"unknown window: no w", "r", []keyrate.PolicyDecision{part("", 7, 0)}, "", `"r";q=7`},
		{"unknown limits are left out", "r", []keyrate.PolicyDecision{part("a", 0, time.Second), part("b", 3, time.Second), part("c", 0, time.Second)}, "",
			`"b";q=3;w=1`},
		{"no limit known at all", "r", []keyrate.PolicyDecision{part("a", 0, time.Second)}, "", ``},
	} {
		if got := string(AppendPolicies([]byte("x"), c.route, c.parts, c.unit)); got != "x"+c.want {
			t.Errorf("%s: %s\nwant %s", c.name, got[1:], c.want)
		}
	}
}

func TestWholeSeconds(t *testing.T) {
	for window, want := range map[time.Duration]int64{
		time.Second: 1, 24 * time.Hour: 86400, 500 * time.Millisecond: 0, 1500 * time.Millisecond: 0, 0: 0, -time.Second: 0,
	} {
		if got := WholeSeconds(window); got != want {
			t.Errorf("WholeSeconds(%v) = %d, want %d", window, got, want)
		}
	}
}
