// Package reservation holds the weight a middleware admitted a request at,
// in the request's context, for middleware.ReportWeight to settle.
package reservation

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/keyrate/keyrate"
)

// Reservation is the weight a middleware admitted a request at, held in
// the request's context while its handler runs, so that the handler can
// say what the request really weighed (middleware.ReportWeight) once it
// knows. The middleware then gives the backend back the part that was not
// used (keyrate.Limiter.RefundN), exactly.
type Reservation struct {
	reserved int
	weight   atomic.Int64 // the weight reported, +1; 0 until one is
}

type key struct{}

// In returns a copy of ctx that carries *r, a zero Reservation of n that
// the caller allocates (with something of its own, so that it costs no
// allocation apart). r must not be copied or reused once ctx carries it:
// a handler may keep the context.
func In(ctx context.Context, r *Reservation, n int) context.Context {
	r.reserved = n
	return context.WithValue(ctx, key{}, r)
}

// Report records weight as what the request of ctx really weighed; see
// middleware.ReportWeight.
func Report(ctx context.Context, weight int) error {
	r, ok := ctx.Value(key{}).(*Reservation)
	switch {
	case !ok:
		return fmt.Errorf("%w: the request holds no reservation", keyrate.ErrNothingToRefund)
	case weight < 0 || weight > r.reserved:
		return fmt.Errorf("%w: a weight of %d, the request reserved %d", keyrate.ErrExceedsLimit, weight, r.reserved)
	}
	r.weight.Store(int64(weight) + 1)
	return nil
}

// Unused returns how much of the reservation the handler's last report
// left unused, and whether it has reported one.
func (r *Reservation) Unused() (int, bool) {
	w := r.weight.Load()
	if w == 0 {
		return 0, false
	}
	return r.reserved - int(w-1), true
}
