package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// ErrBudgetExceeded is wrapped by the error of a backend call that
// outlived the time budget a Caller bounds it by. That error also matches
// context.DeadlineExceeded. It is a store failure, answered per the
// FailureMode.
var ErrBudgetExceeded = errors.New("keyrate: backend exceeded its time budget")

// ErrClientGone is wrapped by the error of a request whose context was
// done before it could be decided: the client hung up, reset the stream,
// or its deadline passed. That error also wraps the context's own error
// (context.Canceled or context.DeadlineExceeded). The store is not at
// fault, so it is no store failure; and the request must not be served,
// whatever the FailureMode, or a client could have work done over its
// limit by giving up on its requests.
var ErrClientGone = errors.New("keyrate: the request ended before it was decided")

// Caller asks one backend for decisions as httplimit and grpclimit do: on
// the request's goroutine when the backend bounds its own calls, else on a
// goroutine of its own under a time budget, so that even a backend that
// ignores its context costs a request no more than the budget; never for a
// request whose client has gone; and with the client's identity, as the
// client sent it, in the context, for the backend's tier function. It is
// safe for concurrent use.
type Caller struct {
	backend   keyrate.Backend
	all       backend.AllTaker // the backend as one; nil when it is not
	inline    bool             // the backend is backend.Bounded: no goroutine, no timer
	identity  bool             // the backend may read the identity: pass it
	budget    time.Duration
	budgetErr error // what a call that outlives the budget fails with
}

// NewCaller returns a Caller for b. A backend.Bounded b (the in-process
// *keyrate.Limiter, which never waits, or the Redis backend, which bounds
// its own calls) is called under its own budget alone, and budget is not
// used. Any other is called under budget, which must then be positive. A
// nil b or such a budget gives an error wrapping keyrate.ErrConfig.
func NewCaller(b keyrate.Backend, budget time.Duration) (*Caller, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: middleware: backend is nil", keyrate.ErrConfig)
	}
	_, bounded := b.(backend.Bounded)
	if !bounded && budget <= 0 {
		return nil, fmt.Errorf("%w: middleware: time budget is %v, want > 0", keyrate.ErrConfig, budget)
	}
	all, _ := b.(backend.AllTaker)
	return &Caller{
		backend:   b,
		all:       all,
		inline:    bounded,
		identity:  tiered(b),
		budget:    budget,
		budgetErr: fmt.Errorf("%w (%v): %w", ErrBudgetExceeded, budget, context.DeadlineExceeded),
	}, nil
}

type result struct {
	d   keyrate.Decision
	err error
}

// Take asks the backend about a request of weight n for key, made by the
// client identity names as it sent it (see backend.ContextWithIdentity: an
// API key without the route and header name the key adds to it); ctx is
// the request's. A request whose ctx is done is not asked about at all,
// and one whose ctx ends before the backend answers fails too: both with
// an error wrapping ErrClientGone. An answer that came in time stands,
// admitted or not, even if ctx has ended since.
func (c *Caller) Take(ctx context.Context, key, identity string, n int) (keyrate.Decision, error) {
	var d keyrate.Decision
	err := c.TakeInto(ctx, key, identity, n, &d)
	return d, err
}

// TakeInto is Take with the Decision written into *d (the zero Decision
// when the request is not asked about, or its client has gone), which
// saves a middleware a copy of it on every request: a Decision, with every
// policy's part, is over 500 bytes.
func (c *Caller) TakeInto(ctx context.Context, key, identity string, n int, d *keyrate.Decision) error {
	if ctx.Err() != nil {
		*d = keyrate.Decision{}
		return gone(ctx)
	}
	// The backend falls back to the key when no identity is given, so an
	// identity equal to the key costs nothing.
	bctx := ctx
	if c.identity && identity != key {
		bctx = backend.ContextWithIdentity(ctx, identity)
	}
	var err error
	if c.inline {
		*d, err = c.backend.TakeContext(bctx, key, n)
	} else {
		*d, err = c.bounded(bctx, key, n)
	}
	if err != nil && ctx.Err() != nil {
		*d = keyrate.Decision{}
		return gone(ctx)
	}
	return err
}

// gone returns the error for a request whose ctx is done.
func gone(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != err {
		return fmt.Errorf("%w: %w: %w", ErrClientGone, err, cause)
	}
	return fmt.Errorf("%w: %w", ErrClientGone, err)
}

// bounded calls the backend, which does not bound its own calls, under the
// budget.
func (c *Caller) bounded(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.budget, c.budgetErr)
	defer cancel()
	// The call runs in its own goroutine so that a backend that ignores ctx
	// costs the request no more than the budget. Such a backend keeps the
	// goroutine until it returns; the buffer lets it exit then.
	done := make(chan result, 1)
	go func() {
		d, err := c.backend.TakeContext(ctx, key, n)
		done <- result{d, err}
	}()
	select {
	case res := <-done:
		if res.err != nil && ctx.Err() != nil && errors.Is(res.err, ctx.Err()) {
			res.err = context.Cause(ctx) // say whether the budget or the request ran out
		}
		return res.d, res.err
	case <-ctx.Done():
		return keyrate.Decision{}, context.Cause(ctx)
	}
}

// ErrRefundFailed is wrapped by the error of a refund the backend could
// not make (see Caller.Refund). The request was decided and served; its
// events stay counted, which errs on the side of the limit.
var ErrRefundFailed = errors.New("keyrate: refund failed")

// tiered reports whether b may read the identity a context carries: when
// it says so (backend.Described), or when it says nothing.
func tiered(b keyrate.Backend) bool {
	if d, ok := b.(backend.Described); ok {
		return d.Tiered()
	}
	return true
}

// CanRefund reports whether the backend can give back a decision's events,
// in whole or in part: whether it is a backend.Refunder, as
// *keyrate.Limiter and the Redis backend are.
func (c *Caller) CanRefund() bool {
	_, ok := c.backend.(backend.Refunder)
	return ok
}

// Refund gives back the events the admitted decision *d recorded for key,
// once its request has been served, and consumes d's Receipt. It runs even
// when ctx is done (the client may hang up after its response), under the
// budget when the backend does not bound its own calls. Its error wraps
// ErrRefundFailed.
func (c *Caller) Refund(ctx context.Context, key string, d *keyrate.Decision) error {
	return c.RefundN(ctx, key, d, d.Receipt.N())
}

// RefundN is Refund of n of the decision's events, the part of a
// reservation its request did not use (see Reservation).
func (c *Caller) RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error {
	ctx = context.WithoutCancel(ctx)
	if !c.inline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.budget, c.budgetErr)
		defer cancel()
	}
	r, ok := c.backend.(backend.Refunder)
	if !ok {
		return fmt.Errorf("%w: the backend cannot refund", ErrRefundFailed)
	}
	if err := r.RefundN(ctx, key, d, n); err != nil {
		return fmt.Errorf("%w: %w", ErrRefundFailed, err)
	}
	return nil
}
