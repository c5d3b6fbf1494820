package grpclimit

import (
	"context"
	"github.com/keyrate/keyrate/middleware/adapter"
	"strconv"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// The metadata keys of a token budget's model-API fields, as
// httplimit.TokenHeaders writes them: by budget (requests, tokens), then
// limit, remaining, reset.
var tokenKeys = [2][3]string{
	{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
	{"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
}

// takeTokens decides a token budget's call (WithTokenBudget) in one
// TakeAll: it sets ev.Budgets, and returns the Decision that stands for
// both and the hits, whose keys a settle gives back to.
func (r *route) takeTokens(ctx context.Context, ev *middleware.Event) (keyrate.Decision, *[2]keyrate.Hit, error) {
	hits := new([2]keyrate.Hit)
	ds, ok, err := r.caller.TakeAll(ctx, adapter.TokenHits(hits, ev.Key, ev.Weight))
	if err != nil {
		return keyrate.Decision{}, nil, err
	}
	ev.Budgets = ds
	return adapter.TokenDecision(ds, ok), hits, nil
}

// holds reports whether an admitted call's decision recorded anything
// that could be given back.
func holds(ev *middleware.Event) bool {
	if ev.Budgets != nil {
		return ev.Budgets[0].Receipt.N() > 0 || ev.Budgets[1].Receipt.N() > 0
	}
	return ev.Decision.Receipt.N() > 0
}

// tokenFields returns the header metadata of a token budget's call of
// weight cost, ds being both budgets' Decisions and admitted whether it
// was: ratelimit-policy and ratelimit with the requests budget's members,
// then the tokens budget's, and the six model-API keys, each trio from
// its budget's binding policy.
func (r *route) tokenFields(ds []keyrate.Decision, rev ratelimitfield.Revision, cost int, admitted bool) metadata.MD {
	var buf [256]byte
	weights := [2]int{1, cost}
	if !admitted {
		weights = [2]int{} // a budget that had room describes itself as it stands
	}
	b := buf[:0]
	for i := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = rev.AppendRateLimit(b, &ds[i], r.method, weights[i])
	}
	md := make(metadata.MD, 8)
	md[mdRateLimit] = []string{string(b)}
	b = buf[:0]
	for i := range ds {
		if p := r.policyFor(&ds[i]); p != "" {
			if len(b) > 0 {
				b = append(b, ", "...)
			}
			b = append(b, p...)
		}
	}
	if len(b) > 0 {
		md[mdPolicy] = []string{string(b)}
	}
	vals := make([]string, 6)
	for i := range ds {
		d := &ds[i]
		vals[3*i] = strconv.Itoa(d.Limit)
		vals[3*i+1] = strconv.Itoa(max(d.Remaining, 0))
		vals[3*i+2] = string(adapter.AppendReset(buf[:0], d.ResetAfter))
		for j := range 3 {
			md[tokenKeys[i][j]] = vals[3*i+j : 3*i+j+1 : 3*i+j+1]
		}
	}
	return md
}

// settleTokens is settle for a token budget's call: WithRefund gives back
// both budgets' events, a reported cost the tokens it did not use.
func (l *Limiter) settleTokens(ctx context.Context, r *route, ev middleware.Event, hits *[2]keyrate.Hit, res *adapter.Reservation, served error) {
	req, tok := &ev.Budgets[0], &ev.Budgets[1]
	all := l.refund != nil && l.refund(status.Code(served))
	give := 0
	switch {
	case all:
		give = tok.Receipt.N()
		if n := req.Receipt.N(); n > 0 {
			if err := r.caller.RefundN(ctx, hits[0].Key, req, n); err != nil {
				ev.Err = err
				l.hooks.Failed(ev)
			}
		}
	case res != nil:
		if unused, ok := res.Unused(); ok {
			give = min(unused, tok.Receipt.N())
		}
	}
	if give <= 0 {
		return
	}
	if err := r.caller.RefundN(ctx, hits[1].Key, tok, give); err != nil {
		ev.Err = err
		l.hooks.Failed(ev)
	}
}
