package ratelimitfield

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

// t per policy: the refill when the policy had room, the retry when it
// refused and waiting helps, nothing when nothing is held.
func TestT(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		name string
		p    keyrate.PolicyDecision
		t    int64
		ok   bool
	}{
		{"room: the refill, rounded up", keyrate.PolicyDecision{Allowed: true, RefillAfter: 2100 * time.Millisecond, ResetAfter: 50 * s}, 3, true},
		{"refused: the retry", keyrate.PolicyDecision{RetryAfter: 44200 * time.Millisecond, RefillAfter: 10 * s, ResetAfter: 50 * s}, 45, true},
		{"never fits: the refill", keyrate.PolicyDecision{RefillAfter: 10 * s, ResetAfter: 50 * s}, 10, true},
		{"room while another refused: the refill", keyrate.PolicyDecision{Allowed: true, RefillAfter: 7 * s}, 7, true},
		{"no refill from the backend: the reset", keyrate.PolicyDecision{Allowed: true, ResetAfter: 1500 * time.Millisecond}, 2, true},
		{"nothing held", keyrate.PolicyDecision{Allowed: true}, 0, false},
		{"a nanosecond is a second", keyrate.PolicyDecision{Allowed: true, RefillAfter: 1}, 1, true},
	} {
		if got, ok := T(&c.p); got != c.t || ok != c.ok {
			t.Errorf("%s: T = %d, %v; want %d, %v", c.name, got, ok, c.t, c.ok)
		}
	}
}

func TestAppendUsages(t *testing.T) {
	parts := []keyrate.PolicyDecision{
		{Policy: keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}, Remaining: 0, RetryAfter: 300 * time.Millisecond, RefillAfter: 300 * time.Millisecond},
		{Policy: keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}, Allowed: true, Remaining: 990, RefillAfter: 51840 * time.Second},
		{Policy: keyrate.Policy{Name: "empty", Limit: 5, Window: time.Hour}, Allowed: true, Remaining: 5},
		{Policy: keyrate.Policy{Name: "over", Limit: 5, Window: time.Hour}, Allowed: true, Remaining: -2, RefillAfter: time.Hour},
	}
	want := `"second";r=0;t=1, "day";r=990;t=51840, "empty";r=5, "over";r=0;t=3600`
	if got := string(AppendUsages(nil, "api", parts)); got != want {
		t.Errorf("AppendUsages = %s\nwant %s", got, want)
	}
	if got := string(AppendUsages([]byte("x"), "api", nil)); got != "x" {
		t.Errorf("AppendUsages of no parts = %q, want nothing appended", got)
	}
}
