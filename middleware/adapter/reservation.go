package adapter

import (
	"context"

	"github.com/keyrate/keyrate/internal/reservation"
)

// Reservation is the weight a middleware admitted a request at, held in
// the request's context while its handler runs, so that the handler can
// report what the request really weighed (middleware.ReportWeight); its
// Unused method then says what to give back.
type Reservation = reservation.Reservation

// Reserve returns a copy of ctx that carries a Reservation of n, for the
// handler of a request admitted at weight n, and the Reservation.
func Reserve(ctx context.Context, n int) (context.Context, *Reservation) {
	r := new(Reservation)
	return reservation.In(ctx, r, n), r
}
