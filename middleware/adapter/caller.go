package adapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware"
)

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
		budgetErr: fmt.Errorf("%w (%v): %w", middleware.ErrBudgetExceeded, budget, context.DeadlineExceeded),
	}, nil
}

type result struct {
	d   keyrate.Decision
	err error
}

// Take asks the backend about a request of weight n for key, made by the
// client identity names as it sent it (see backend.ContextWithIdentity: an
// API key without the route and header name the key adds to it); ctx is the
// request's. A request whose ctx is done is not asked about at all, and one
// whose ctx ends before the backend answers fails too: both with an error
// wrapping middleware.ErrClientGone. An answer that came in time stands,
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
		return fmt.Errorf("%w: %w: %w", middleware.ErrClientGone, err, cause)
	}
	return fmt.Errorf("%w: %w", middleware.ErrClientGone, err)
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

// RefundN gives back n of the events the admitted decision *d recorded
// for key (d.Receipt.N() of them: the whole decision; fewer: the part of a
// Reservation its request did not use), once its request has been served.
// It runs even when ctx is done (the client may hang up after its
// response), under the budget when the backend does not bound its own
// calls. Its error wraps middleware.ErrRefundFailed.
func (c *Caller) RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error {
	ctx = context.WithoutCancel(ctx)
	if !c.inline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.budget, c.budgetErr)
		defer cancel()
	}
	r, ok := c.backend.(backend.Refunder)
	if !ok {
		return fmt.Errorf("%w: the backend cannot refund", middleware.ErrRefundFailed)
	}
	if err := r.RefundN(ctx, key, d, n); err != nil {
		return fmt.Errorf("%w: %w", middleware.ErrRefundFailed, err)
	}
	return nil
}
