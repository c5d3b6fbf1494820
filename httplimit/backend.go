package httplimit

import "github.com/keyrate/keyrate/internal/call"

// ErrBudgetExceeded is reported to OnError when a backend call outlives the
// time budget. The error also matches context.DeadlineExceeded.
var ErrBudgetExceeded = call.ErrBudgetExceeded

// ErrClientGone is reported to OnError for a request whose context was done
// before it could be decided: its client hung up, or a deadline passed. The
// error also matches the context's own error, context.Canceled or
// context.DeadlineExceeded. Such a request is never served, whatever the
// failure mode and in shadow mode too (see FailureMode).
var ErrClientGone = call.ErrClientGone
