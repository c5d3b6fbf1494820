package middleware

import (
	"context"

	"github.com/keyrate/keyrate/internal/reservation"
)

// ReportWeight tells the middleware that decided the request of ctx (the
// handler's r.Context(), or a gRPC handler's ctx) what the request really
// weighed: 0 to the weight it was admitted at (httplimit.WithWeight,
// grpclimit.WithWeight); the last report counts. The middleware gives
// back the rest, exactly: httplimit as the status is written, so that the
// RateLimit fields sent say what the request left, grpclimit when the
// handler returns (see their package documentation).
//
// Its error wraps keyrate.ErrNothingToRefund when ctx holds no
// reservation (no weight function, a backend that cannot refund, a request
// served unrecorded: shadow mode, failing open), keyrate.ErrExceedsLimit
// for a weight below 0 or above the one reserved, which changes nothing.
func ReportWeight(ctx context.Context, weight int) error { return reservation.Report(ctx, weight) }
