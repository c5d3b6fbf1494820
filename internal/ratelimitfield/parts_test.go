package ratelimitfield

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

// A Decision from keyrate.Combine speaks for its parts; one filled in by
// hand speaks for its own fields, with the fallback window when it has none.
func TestParts(t *testing.T) {
	second := keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	day := keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
	d := keyrate.Combine(
		keyrate.PolicyDecision{Policy: second, Remaining: 0, RetryAfter: time.Second},
		keyrate.PolicyDecision{Policy: day, Allowed: true, Remaining: 990},
	)
	var one [1]keyrate.PolicyDecision
	parts := Parts(&d, time.Minute, &one)
	if len(parts) != 2 || parts[0].Policy != second || parts[1].Policy != day || parts[1].Remaining != 990 {
		t.Fatalf("Parts of a combined decision = %+v", parts)
	}
	if !Same(parts, []keyrate.Policy{second, day}) || Same(parts, []keyrate.Policy{day, second}) || Same(parts, []keyrate.Policy{second}) {
		t.Error("Same does not compare the policies in order")
	}

	byHand := keyrate.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Minute}
	parts = Parts(&byHand, 90*time.Second, &one)
	want := keyrate.PolicyDecision{Policy: keyrate.Policy{Limit: 5, Window: 90 * time.Second}, Allowed: true, Remaining: 4, ResetAfter: time.Minute}
	if len(parts) != 1 || parts[0] != want {
		t.Fatalf("Parts of a decision by hand = %+v, want %+v", parts, want)
	}
	byHand.Window = time.Hour
	if parts = Parts(&byHand, 90*time.Second, &one); parts[0].Window != time.Hour {
		t.Errorf("the decision's own window %v lost to the fallback", parts[0].Window)
	}
	if b := Binding(&d); b.Policy != second || b.Allowed || b.RetryAfter != time.Second {
		t.Errorf("Binding = %+v, want the refusing second policy", b)
	}
}
