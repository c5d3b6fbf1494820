package middleware

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/keyrate/keyrate"
)

// Reservation is the weight a middleware admitted a request at, held in
// the request's context while its handler runs, so that the handler can
// say what the request really cost (ReportCost) once it knows: a model
// call reserves its maximum tokens and reports the tokens it used; an
// upload reserves its declared size and reports the bytes it read. The
// middleware then settles it: it gives the backend back the part that was
// not used (keyrate.Limiter.RefundN), exactly.
type Reservation struct {
	reserved int
	cost     atomic.Int64 // the cost reported, +1; 0 until one is
}

type reservationKey struct{}

// Reserve returns a copy of ctx that carries a Reservation of n, for the
// handler of a request admitted at weight n, and the Reservation.
func Reserve(ctx context.Context, n int) (context.Context, *Reservation) {
	r := new(Reservation)
	return ReserveIn(ctx, r, n), r
}

// ReserveIn is Reserve into *r, a zero Reservation that the caller
// allocates with something of its own (httplimit's settling writer), so
// that the reservation costs no allocation apart. r must not be copied or
// reused once ctx carries it: a handler may keep the context.
func ReserveIn(ctx context.Context, r *Reservation, n int) context.Context {
	r.reserved = n
	return context.WithValue(ctx, reservationKey{}, r)
}

// ReportCost tells the middleware that decided the request of ctx what the
// request really cost: 0 to what it was admitted at. Called again, the last
// report counts. The middleware gives back the rest of the weight when the
// handler returns, or, in httplimit, when the response's status is written
// if that comes first (httplimit's package doc says what the RateLimit
// fields then say).
//
// It returns an error wrapping keyrate.ErrNothingToRefund when ctx carries
// no reservation (a route without a cost function, a backend that cannot
// give weight back, a request served without being recorded: in shadow
// mode, or failing open), and one wrapping keyrate.ErrExceedsLimit for a
// cost below 0 or above the weight reserved, which changes nothing: a
// request cannot cost more than it was admitted at.
func ReportCost(ctx context.Context, cost int) error {
	r, ok := ctx.Value(reservationKey{}).(*Reservation)
	switch {
	case !ok:
		return fmt.Errorf("%w: the request holds no reservation", keyrate.ErrNothingToRefund)
	case cost < 0 || cost > r.reserved:
		return fmt.Errorf("%w: a cost of %d, the request reserved %d", keyrate.ErrExceedsLimit, cost, r.reserved)
	}
	r.cost.Store(int64(cost) + 1)
	return nil
}

// Unused returns how much of the reservation the handler's last report
// left unused, and whether it has reported one.
func (r *Reservation) Unused() (int, bool) {
	c := r.cost.Load()
	if c == 0 {
		return 0, false
	}
	return r.reserved - int(c-1), true
}
