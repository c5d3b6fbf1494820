package grpclimit

import (
	"context"

	"github.com/keyrate/keyrate/middleware"
)

// ReportCost tells the interceptor what the call of ctx (the handler's
// context, or its stream's) really cost, once the handler knows: a method
// whose WithCost reserves an estimate (a model call's maximum tokens) gives
// back what the call did not use when its handler returns. cost is 0 to
// the weight reserved; the last report counts. The ratelimit header
// metadata, sent before the handler runs or with its first response, says
// what was reserved. See middleware.ReportCost for its errors; the backend
// must be able to give part of a decision back (*keyrate.Limiter and the
// Redis backend can). It means what httplimit.ReportCost means.
func ReportCost(ctx context.Context, cost int) error { return middleware.ReportCost(ctx, cost) }
