package ratelimitfield

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// Every Revision lists the same policies with the same numbers; only the
// parameters' names differ, and Proposal166 adds what the request
// consumed, nothing for a refusal.
func TestRevisionAppendRateLimit(t *testing.T) {
	second := keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	day := keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
	admitted := backend.Combine(
		keyrate.PolicyDecision{Policy: second, Allowed: true, Remaining: 7, RefillAfter: 300 * time.Millisecond},
		keyrate.PolicyDecision{Policy: day, Allowed: true, Remaining: 990},
	)
	refused := backend.Combine(
		keyrate.PolicyDecision{Policy: second, Remaining: 0, RetryAfter: 1500 * time.Millisecond, RefillAfter: 300 * time.Millisecond},
		keyrate.PolicyDecision{Policy: day, Allowed: true, Remaining: 990, RefillAfter: time.Hour},
	)
	for _, c := range []struct {
		name string
		v    Revision
		d    keyrate.Decision
		cost int
		want string
	}{
		{"draft-10, admitted", Draft10, admitted, 3, `"second";r=7;t=1, "day";r=990`},
		{"draft-10, refused", Draft10, refused, 3, `"second";r=0;t=2, "day";r=990;t=3600`},
		{"proposal-166, admitted", Proposal166, admitted, 3, `"second";a=7;w=1;c=3, "day";a=990;c=3`},
		{"proposal-166, refused: nothing consumed", Proposal166, refused, 3, `"second";a=0;w=2;c=0, "day";a=990;w=3600;c=0`},
		{"proposal-166, free", Proposal166, admitted, 0, `"second";a=7;w=1;c=0, "day";a=990;c=0`},
		{"unknown: draft-10's", Revision(9), admitted, 3, `"second";r=7;t=1, "day";r=990`},
	} {
		assert.Equal(t, c.want, string(c.v.AppendRateLimit(nil, &c.d, "api", c.cost)), c.name)
	}
	assert.Equal(t, string(AppendRateLimit(nil, &refused, "api")), string(Draft10.AppendRateLimit(nil, &refused, "api", 1)),
		"AppendRateLimit is Draft10's")
	byHand := keyrate.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Minute}
	assert.Equal(t, `"api";a=4;w=60;c=1`, string(Proposal166.AppendRateLimit(nil, &byHand, "api", 1)), "a Decision by hand")
}

func TestRevisionNames(t *testing.T) {
	assert.True(t, Draft10.Known())
	assert.True(t, Proposal166.Known())
	assert.False(t, Revision(2).Known())
	assert.Equal(t, "draft-10", Draft10.String())
	assert.Equal(t, "proposal-166", Proposal166.String())
	assert.Equal(t, "revision(7)", Revision(7).String())
}

// Every Revision appends into a caller's buffer without allocating.
func TestRevisionAllocations(t *testing.T) {
	d := backend.Combine(
		keyrate.PolicyDecision{Policy: keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}, Allowed: true, Remaining: 9, RefillAfter: time.Second},
		keyrate.PolicyDecision{Policy: keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}, Allowed: true, Remaining: 999, RefillAfter: time.Hour},
	)
	var buf [128]byte
	for _, v := range []Revision{Draft10, Proposal166} {
		assert.Zero(t, testing.AllocsPerRun(100, func() { v.AppendRateLimit(buf[:0], &d, "api", 1) }), v.String())
	}
}
