// Package call asks a keyrate.Backend for a decision the way every
// middleware should: directly when the backend bounds its own calls, else on a goroutine under a time budget, so that even a backend
// that ignores its context costs a request no more than the budget; never
// for a request whose client has gone; and with the client's identity, as
// the client sent it, in the context for the backend's tier function.
// httplimit and grpclimit share it, so both classify and bound failures
// alike.
package call

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/tierhint"
)

// ErrBudgetExceeded is wrapped by the error of a call that outlived the
// time budget. That error also matches context.DeadlineExceeded.
var ErrBudgetExceeded = errors.New("keyrate: backend exceeded its time budget")

// ErrClientGone is wrapped by the error of a call whose request context
// was done before it could be decided: the client hung up, reset the
// stream, or its deadline passed. That error also wraps the context's own
// error (context.Canceled or context.DeadlineExceeded). The store is not
// at fault, so it is no store error; and the request must not be served,
// whatever the failure mode, or a client could have work done over its
// limit by giving up on its requests.
var ErrClientGone = errors.New("keyrate: the request ended before it was decided")

// Caller calls one backend. Its zero value is not usable; use New.
type Caller struct {
	backend   keyrate.Backend
	inline    bool // the backend returns promptly by itself: no goroutine, no timer
	identity  bool // the backend may read the identity: pass it
	budget    time.Duration
	budgetErr error // what a call that outlives the budget fails with
}

// New returns a Caller for b. budget bounds each call unless b is
// keyrate.Bounded (it bounds itself); it must be positive.
func New(b keyrate.Backend, budget time.Duration) *Caller {
	c := &Caller{
		backend:   b,
		identity:  tierhint.ReadsIdentity(b),
		budget:    budget,
		budgetErr: fmt.Errorf("%w (%v): %w", ErrBudgetExceeded, budget, context.DeadlineExceeded),
	}
	if _, ok := b.(keyrate.Bounded); ok {
		c.inline = true
	}
	return c
}

// ReadsIdentity reports whether Take passes the backend the identity it is
// given: whether the backend may read it. A caller may skip working it out
// when not.
func (c *Caller) ReadsIdentity() bool { return c.identity }

type result struct {
	d   keyrate.Decision
	err error
}

// Take asks the backend about a request of weight n for key, made by the
// client identity names as it sent it (see keyrate.ContextWithIdentity);
// ctx is the request's. A request whose ctx is done is not asked about at
// all, and one whose ctx ends before the backend answers fails too: both
// with an error wrapping ErrClientGone. An answer that came in time stands,
// admitted or not, even if ctx has ended since.
func (c *Caller) Take(ctx context.Context, key, identity string, n int) (keyrate.Decision, error) {
	if ctx.Err() != nil {
		return keyrate.Decision{}, gone(ctx)
	}
	// The backend falls back to the key when no identity is given, so an
	// identity equal to the key costs nothing.
	bctx := ctx
	if c.identity && identity != key {
		bctx = keyrate.ContextWithIdentity(ctx, identity)
	}
	d, err := c.take(bctx, key, n)
	if err != nil && ctx.Err() != nil {
		return keyrate.Decision{}, gone(ctx)
	}
	return d, err
}

// gone returns the error for a request whose ctx is done.
func gone(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != err {
		return fmt.Errorf("%w: %w: %w", ErrClientGone, err, cause)
	}
	return fmt.Errorf("%w: %w", ErrClientGone, err)
}

// take calls the backend, bounding the call by the budget unless the
// backend returns promptly by itself.
func (c *Caller) take(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	if c.inline {
		return c.backend.TakeContext(ctx, key, n)
	}
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

// ClientCaused reports whether err was caused by the request itself (an
// invalid key) rather than by the store. Such an error must never let the
// request through, whatever the failure mode: the client could provoke it
// at will.
func ClientCaused(err error) bool { return errors.Is(err, keyrate.ErrInvalidKey) }

// ClientGone reports whether err is that of a request whose client had
// gone before it was decided (ErrClientGone). Such a request is never
// served, and says nothing about the store.
func ClientGone(err error) bool { return errors.Is(err, ErrClientGone) }
