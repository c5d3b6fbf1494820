package ratelimitfield

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// t per policy: the refill when the policy had room, the retry when it
// refused and waiting helps, nothing when nothing is held.
func TestT(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		name string
		d    keyrate.Decision
		t    int64
		ok   bool
	}{
		{"room: the refill, rounded up", keyrate.Decision{Allowed: true, RefillAfter: 2100 * time.Millisecond, ResetAfter: 50 * s}, 3, true},
		{"refused: the retry", keyrate.Decision{RetryAfter: 44200 * time.Millisecond, RefillAfter: 10 * s, ResetAfter: 50 * s}, 45, true},
		{"never fits: the refill", keyrate.Decision{RefillAfter: 10 * s, ResetAfter: 50 * s}, 10, true},
		{"no refill from the backend: the reset", keyrate.Decision{Allowed: true, ResetAfter: 1500 * time.Millisecond}, 2, true},
		{"nothing held", keyrate.Decision{Allowed: true}, 0, false},
		{"a nanosecond is a second", keyrate.Decision{Allowed: true, RefillAfter: 1}, 1, true},
	} {
		if got, ok := T(&c.d); got != c.t || ok != c.ok {
			t.Errorf("%s: T = %d, %v; want %d, %v", c.name, got, ok, c.t, c.ok)
		}
	}
}

// Each member has its policy's own r and t: a policy with room while
// another refused gives its refill, not the refusal's retry.
func TestAppendRateLimit(t *testing.T) {
	d := backend.Combine(
		keyrate.PolicyDecision{Policy: keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}, Remaining: 0, RetryAfter: 300 * time.Millisecond, RefillAfter: 300 * time.Millisecond},
		keyrate.PolicyDecision{Policy: keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}, Allowed: true, Remaining: 990, RefillAfter: 51840 * time.Second},
		keyrate.PolicyDecision{Policy: keyrate.Policy{Name: "empty", Limit: 5, Window: time.Hour}, Allowed: true, Remaining: 5},
		keyrate.PolicyDecision{Policy: keyrate.Policy{Name: "over", Limit: 5, Window: time.Hour}, Allowed: true, Remaining: -2, RefillAfter: time.Hour},
	)
	want := `"second";r=0;t=1, "day";r=990;t=51840, "empty";r=5, "over";r=0;t=3600`
	if got := string(AppendRateLimit(nil, &d, "api")); got != want {
		t.Errorf("AppendRateLimit = %s\nwant %s", got, want)
	}
	if b, ok := T(&d); b != 1 || !ok {
		t.Errorf("T = %d, %v; want the refusing second's 1", b, ok)
	}
}

// The common case appends into a caller's buffer without allocating.
func TestAppendAllocations(t *testing.T) {
	l, err := keyrate.NewPolicies([]keyrate.Policy{{Name: "second", Limit: 10, Window: time.Second}, {Name: "day", Limit: 1000, Window: 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := l.Take("k", 1)
	var buf [128]byte
	if n := testing.AllocsPerRun(100, func() {
		AppendPolicy(buf[:0], &d, "api", "")
		AppendRateLimit(buf[:0], &d, "api")
	}); n != 0 {
		t.Errorf("%v allocations, want none", n)
	}
}

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		0: 0, -time.Second: 0, 1: 1, time.Second: 1, time.Second + 1: 2, 59500 * time.Millisecond: 60,
	} {
		if got := Seconds(d); got != want {
			t.Errorf("Seconds(%v) = %d, want %d", d, got, want)
		}
	}
}
