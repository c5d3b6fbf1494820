package httplimit

import (
	"net/http"
	"strconv"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// WithTokenBudget decides each request against two budgets of the backend
// at once, as a model API sells them: requests and tokens. The request
// counts at a weight of 1 against key + middleware.RequestsSuffix and at
// its cost (WithCost: its max_tokens, say) against key +
// middleware.TokensSuffix, in one TakeAll, all or nothing: refused by
// either, it counts against neither. ReportCost gives back what it did not
// use from the tokens alone; WithRefund gives back both. The backend picks
// each key's policies with middleware.TokenTier (see the package README
// for the recipe, in process or in Redis) and must take all:
// *keyrate.Limiter or backend.AllTaker, else New fails with
// keyrate.ErrConfig. The fields list both budgets' policies; see
// TokenHeaders. Cost: the TakeAll, one key string per budget. Default: off.
func WithTokenBudget() Option { return func(c *config) { c.tokens = true } }

// Canonical forms of TokenHeaders' fields.
var (
	hLimitRequests     = http.CanonicalHeaderKey("x-ratelimit-limit-requests")
	hRemainingRequests = http.CanonicalHeaderKey("x-ratelimit-remaining-requests")
	hResetRequests     = http.CanonicalHeaderKey("x-ratelimit-reset-requests")
	hLimitTokens       = http.CanonicalHeaderKey("x-ratelimit-limit-tokens")
	hRemainingTokens   = http.CanonicalHeaderKey("x-ratelimit-remaining-tokens")
	hResetTokens       = http.CanonicalHeaderKey("x-ratelimit-reset-tokens")
)

// tokenFields are TokenHeaders' fields, by budget (requests, tokens) and
// by what they hold (limit, remaining, reset).
var tokenFields = [2][3]string{
	{hLimitRequests, hRemainingRequests, hResetRequests},
	{hLimitTokens, hRemainingTokens, hResetTokens},
}

// setTokenFields writes the RateLimit fields of a token budget's request,
// ds being both budgets' Decisions and admitted whether it was: one
// RateLimit-Policy value and one RateLimit value, each with the requests
// budget's members, then the tokens budget's.
func (m *Middleware) setTokenFields(f *fields, h http.Header, ds []keyrate.Decision, cost int, admitted bool) {
	start := len(f.buf)
	if m.policy != "" && m.unit == "" && samePolicies(&ds[0], m.policies) { // m.policy carries the unit, which is the tokens'
		f.buf = append(f.buf, m.policy...)
	} else {
		f.buf = ratelimitfield.AppendPolicy(f.buf, &ds[0], m.route, "")
	}
	if len(f.buf) > start {
		f.buf = append(f.buf, ", "...)
	}
	f.buf = ratelimitfield.AppendPolicy(f.buf, &ds[1], m.route, m.unit)
	f.add(h, hPolicy, f.value(start))
	start = len(f.buf)
	f.buf = m.appendTokenRateLimit(f.buf, ds, cost, admitted, 0, 0)
	f.add(h, hRateLimit, f.value(start))
}

// appendTokenRateLimit appends the RateLimit value of a token budget's
// request, once given[0] of its request and given[1] of its tokens have
// been given back.
func (m *Middleware) appendTokenRateLimit(b []byte, ds []keyrate.Decision, cost int, admitted bool, givenRequests, givenTokens int) []byte {
	weights := [2]int{1 - givenRequests, cost - givenTokens}
	given := [2]int{givenRequests, givenTokens}
	for i := range 2 {
		if i > 0 {
			b = append(b, ", "...)
		}
		d := &ds[i]
		if given[i] > 0 {
			after := raised(d, given[i])
			d = &after
		}
		w := weights[i]
		if !admitted {
			w = 0 // a budget that had room describes itself as it stands
		}
		b = m.revision.AppendRateLimit(b, d, m.route, w)
	}
	return b
}

// raised returns d as it stands once given of its weight has been given
// back: each policy's Remaining up by given, at most its limit.
func raised(d *keyrate.Decision, given int) keyrate.Decision {
	after := *d
	after.Remaining = min(after.Remaining+given, after.Limit)
	for i := range after.Policies() {
		p := &after.Policies()[i]
		p.Remaining = min(p.Remaining+given, p.Limit)
	}
	return after
}

// setModelFields writes TokenHeaders' six fields from both budgets'
// Decisions, each from its binding policy.
func (m *Middleware) setModelFields(f *fields, h http.Header, ds []keyrate.Decision) {
	for i := range 2 {
		d := &ds[i]
		f.set(h, tokenFields[i][0], f.int(int64(d.Limit)))
		f.set(h, tokenFields[i][1], f.int(int64(max(d.Remaining, 0))))
		start := len(f.buf)
		f.buf = middleware.AppendReset(f.buf, d.ResetAfter)
		f.set(h, tokenFields[i][2], f.value(start))
	}
}

// resetTokenFields rewrites the fields setHeaders wrote for a token
// budget's admitted request of weight cost, once givenRequests of its
// request (0 or 1) and givenTokens of its tokens have been given back
// before its status went out.
func (m *Middleware) resetTokenFields(f *fields, h http.Header, ds []keyrate.Decision, cost, givenRequests, givenTokens int) {
	var scratch [256]byte // the values written before, to find them by
	if m.headers&DraftHeaders != 0 {
		old := m.appendTokenRateLimit(scratch[:0], ds, cost, true, 0, 0)
		start := len(f.buf)
		f.buf = m.appendTokenRateLimit(f.buf, ds, cost, true, givenRequests, givenTokens)
		replace(h, hRateLimit, old, f.value(start))
	}
	given := [2]int{givenRequests, givenTokens}
	binding := middleware.TokenDecision(ds, true)
	for i := range 2 {
		if given[i] == 0 {
			continue
		}
		d := &ds[i]
		old, now := strconv.AppendInt(scratch[:0], int64(max(d.Remaining, 0)), 10), f.int(int64(max(min(d.Remaining+given[i], d.Limit), 0)))
		if m.headers&TokenHeaders != 0 {
			replace(h, tokenFields[i][1], old, now)
		}
		if i == 1 && binding.Remaining == d.Remaining && binding.Limit == d.Limit {
			if m.headers&LegacyHeaders != 0 {
				replace(h, hRemaining, old, now)
			}
			if m.headers&XHeaders != 0 {
				replace(h, hXRemaining, old, now)
			}
		}
	}
}
