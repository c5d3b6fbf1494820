package ratelimitfield

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

func TestAppendPolicies(t *testing.T) {
	p := func(name string, limit int, window time.Duration) keyrate.Policy {
		return keyrate.Policy{Name: name, Limit: limit, Window: window}
	}
	for _, c := range []struct {
		name     string
		route    string
		policies []keyrate.Policy
		unit     string
		want     string
	}{
		{"two policies", "", []keyrate.Policy{p("second", 10, time.Second), p("day", 1000, 24*time.Hour)}, "",
			`"second";q=10;w=1, "day";q=1000;w=86400`},
		{"under a route, with a unit", "upload", []keyrate.Policy{p("", 1000, time.Minute)}, "content-bytes",
			`"upload";q=1000;qu="content-bytes";w=60`},
		{"no whole-second window: no w", "", []keyrate.Policy{p("burst", 10, 500*time.Millisecond), p("", 20, 1500*time.Millisecond)}, "",
			`"burst";q=10, "default";q=20`},
		{"unknown window: no w", "r", []keyrate.Policy{p("", 7, 0)}, "", `"r";q=7`},
		{"unknown limits are left out", "r", []keyrate.Policy{p("a", 0, time.Second), p("b", 3, time.Second), p("c", 0, time.Second)}, "",
			`"b";q=3;w=1`},
		{"no limit known at all", "r", []keyrate.Policy{p("a", 0, time.Second)}, "", ``},
		{"no policies", "r", nil, "", ``},
	} {
		if got := string(AppendPolicies([]byte("x"), c.policies, c.route, c.unit)); got != "x"+c.want {
			t.Errorf("%s: %s\nwant %s", c.name, got[1:], c.want)
		}
		// A Decision under the same policies lists them alike.
		parts := make([]keyrate.PolicyDecision, len(c.policies))
		for i := range c.policies {
			parts[i].Policy = c.policies[i]
		}
		if len(parts) == 0 {
			continue
		}
		d := backend.Combine(parts...)
		if got := string(AppendPolicy([]byte("x"), &d, c.route, c.unit)); got != "x"+c.want {
			t.Errorf("%s, from a Decision: %s\nwant %s", c.name, got[1:], c.want)
		}
	}
}

// A Decision filled in by hand, as a backend.Func may return it,
// speaks for its binding policy's own fields.
func TestDecisionByHand(t *testing.T) {
	d := keyrate.Decision{Policy: "burst", Allowed: true, Limit: 5, Window: 90 * time.Second, Remaining: 4, ResetAfter: time.Minute}
	if got := string(AppendPolicy(nil, &d, "api", "")); got != `"burst";q=5;w=90` {
		t.Errorf("AppendPolicy = %s", got)
	}
	if got := string(AppendRateLimit(nil, &d, "api")); got != `"burst";r=4;t=60` {
		t.Errorf("AppendRateLimit = %s", got)
	}
	d = keyrate.Decision{Allowed: true, Limit: 5, Remaining: 4}
	if got := string(AppendPolicy(nil, &d, "api", "")); got != `"api";q=5` {
		t.Errorf("without a window: AppendPolicy = %s, want no w", got)
	}
	if got := string(AppendRateLimit(nil, &d, "api")); got != `"api";r=4` {
		t.Errorf("nothing held: AppendRateLimit = %s, want no t", got)
	}
	d = keyrate.Decision{}
	if got := string(AppendPolicy([]byte("x"), &d, "api", "")); got != "x" {
		t.Errorf("no limit: AppendPolicy appended %q, want nothing", got[1:])
	}
}

func TestWholeSeconds(t *testing.T) {
	for window, want := range map[time.Duration]int64{
		time.Second: 1, 24 * time.Hour: 86400, 500 * time.Millisecond: 0, 1500 * time.Millisecond: 0, 0: 0, -time.Second: 0,
	} {
		if got := wholeSeconds(window); got != want {
			t.Errorf("wholeSeconds(%v) = %d, want %d", window, got, want)
		}
	}
}
