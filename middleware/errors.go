package middleware

import "errors"

// ErrBudgetExceeded is wrapped by the error of a backend call that
// outlived its time budget (httplimit.WithTimeBudget,
// grpclimit.WithTimeBudget). That error also matches
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

// ErrRefundFailed is wrapped by the error of a refund the backend could
// not make (httplimit.WithRefund, ReportWeight). The request was decided
// and served; its events stay counted, which errs on the side of the
// limit.
var ErrRefundFailed = errors.New("keyrate: refund failed")
