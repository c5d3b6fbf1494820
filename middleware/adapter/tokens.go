package adapter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
)

// A token budget (httplimit.WithTokenBudget, grpclimit.WithTokenBudget)
// decides each request against two keys of one backend, all or nothing:
// the request's key with RequestsSuffix, at a weight of 1, and with
// TokensSuffix, at the request's weight. The backend gives each its
// policies by the suffix: middleware.TokenTier is its tier function.
const (
	RequestsSuffix = "/requests"
	TokensSuffix   = "/tokens"
)

// CanTakeAll reports whether the backend can decide several keys in one
// atomic call (Caller.TakeAll): whether it is a backend.AllTaker.
func (c *Caller) CanTakeAll() bool { return c.all != nil }

// TakeAll asks the backend about a request that counts against every hit,
// all or nothing, as Take asks about one key: never for a request whose ctx
// is done, and failing with an error wrapping middleware.ErrClientGone when
// ctx ends before the answer; under the budget when the backend does not
// bound its own calls. It returns each hit's Decision, in order, and whether
// the request was admitted. The tier function sees each hit's key, not the
// identity. A backend that cannot take all gives an error wrapping
// keyrate.ErrConfig.
func (c *Caller) TakeAll(ctx context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	if ctx.Err() != nil {
		return nil, false, gone(ctx)
	}
	if c.all == nil {
		return nil, false, fmt.Errorf("%w: middleware: the backend cannot decide several keys at once", keyrate.ErrConfig)
	}
	ds, ok, err := c.takeAll(ctx, hits)
	if err != nil && ctx.Err() != nil {
		return nil, false, gone(ctx)
	}
	return ds, ok, err
}

type resultAll struct {
	ds  []keyrate.Decision
	ok  bool
	err error
}

func (c *Caller) takeAll(ctx context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	if c.inline {
		return c.all.TakeAll(ctx, hits)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.budget, c.budgetErr)
	defer cancel()
	done := make(chan resultAll, 1) // see take
	go func() {
		ds, ok, err := c.all.TakeAll(ctx, hits)
		done <- resultAll{ds, ok, err}
	}()
	select {
	case res := <-done:
		if res.err != nil && ctx.Err() != nil && errors.Is(res.err, ctx.Err()) {
			res.err = context.Cause(ctx)
		}
		return res.ds, res.ok, res.err
	case <-ctx.Done():
		return nil, false, context.Cause(ctx)
	}
}

// TokenDecision returns the Decision that stands for a token budget's
// request, given both budgets' (ds: requests, then tokens) and whether the
// request was admitted: admitted, the tokens budget's, what the request
// reserved; refused, the budget that refused it, and of two that did, the
// one it can never fit, else the one with the longer wait, as one
// Decision's binding policy is chosen. Its Allowed is the request's.
func TokenDecision(ds []keyrate.Decision, admitted bool) keyrate.Decision {
	req, tok := ds[0], ds[1]
	switch {
	case admitted:
		return tok
	case tok.Allowed:
		return req
	case req.Allowed:
		return tok
	case neverFits(&req):
		return req
	case neverFits(&tok) || tok.RetryAfter >= req.RetryAfter:
		return tok
	}
	return req
}

func neverFits(d *keyrate.Decision) bool { return d.RetryAfter == 0 && !d.Overflow }

// TokenHits returns the hits of a token budget's request of weight tokens
// for key, into hits: key + RequestsSuffix at 1, key + TokensSuffix at
// tokens.
func TokenHits(hits *[2]keyrate.Hit, key string, tokens int) []keyrate.Hit {
	hits[0] = keyrate.Hit{Key: key + RequestsSuffix, Weight: 1}
	hits[1] = keyrate.Hit{Key: key + TokensSuffix, Weight: tokens}
	return hits[:]
}

// AppendReset appends d as a reset of the fields model-API clients read
// (httplimit.TokenHeaders, grpclimit.WithTokenBudget), in the form of
// OpenAI's x-ratelimit-reset-requests and -tokens: d rounded up to the
// millisecond, as time.Duration's String writes it ("0s", "12ms",
// "1.5s", "6m0s", "1h0m0s"). Rounded up, so that a client that waits it
// out finds the quota back. A negative d is "0s".
func AppendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms < 1000 {
		b = strconv.AppendInt(b, int64(ms), 10)
		return append(b, "ms"...)
	}
	h, m, s, frac := ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000
	if h > 0 {
		b = strconv.AppendInt(b, int64(h), 10)
		b = append(b, 'h')
	}
	if h > 0 || m > 0 {
		b = strconv.AppendInt(b, int64(m), 10)
		b = append(b, 'm')
	}
	b = strconv.AppendInt(b, int64(s), 10)
	if frac > 0 {
		digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := 3
		for digits[n-1] == '0' {
			n--
		}
		b = append(b, '.')
		b = append(b, digits[:n]...)
	}
	return append(b, 's')
}
