package ratelimitfield

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// TestCalendarPolicyW: a calendar policy's w is the length of the period
// its decision fell in, from another backend's Combine too; without a
// decision, it has none.
func TestCalendarPolicyW(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	day := keyrate.Policy{Name: "day", Limit: 100, Calendar: keyrate.Daily(ny)}
	d := backend.Combine(keyrate.PolicyDecision{Policy: day, Allowed: true, Remaining: 99,
		ResetAfter: 5 * time.Hour, RefillAfter: 5 * time.Hour, Period: 23 * time.Hour})
	if got, want := string(AppendPolicy(nil, &d, "", "")), `"day";q=100;w=82800`; got != want {
		t.Errorf("AppendPolicy: %s, want %s", got, want)
	}
	if got, want := string(AppendRateLimit(nil, &d, "")), `"day";r=99;t=18000`; got != want {
		t.Errorf("AppendRateLimit: %s, want %s", got, want)
	}
	if d.Window != 23*time.Hour {
		t.Errorf("Decision.Window %v, want the period's 23h", d.Window)
	}
	if got, want := string(AppendPolicies(nil, []keyrate.Policy{day}, "", "")), `"day";q=100`; got != want {
		t.Errorf("AppendPolicies: %s, want %s", got, want)
	}
}
