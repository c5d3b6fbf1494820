package httplimit

import (
	"context"

	"github.com/keyrate/keyrate/middleware"
)

// ReportCost tells the middleware what the request of ctx (the handler's
// r.Context()) really cost, once the handler knows: a route whose WithCost
// reserves an estimate (a model call's maximum tokens, an upload's
// declared size) gives back what the request did not use. cost is 0 to the
// weight reserved; the last report counts. The middleware settles as the
// response's status is written, before its header goes out, so that the
// RateLimit fields sent say what the request left; a cost reported only
// after that (a streamed response) is settled when the handler returns,
// and the fields sent said what was reserved. See
// middleware.ReportCost for its errors; the backend must be able to give
// part of a decision back (*keyrate.Limiter and the Redis backend can).
func ReportCost(ctx context.Context, cost int) error { return middleware.ReportCost(ctx, cost) }
