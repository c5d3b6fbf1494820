package middleware

// FailureMode says what a middleware does with a request when it cannot
// get a decision because the store is unavailable: the backend failed (a
// network error, a closed limiter, a store out of memory), or outlived the
// time budget. Either way the error goes to the OnError hook and the
// Observer.
//
//   - FailOpen (the default) serves the request as if it were allowed,
//     advertising the backend's own policies but no usage
//     (RateLimit-Policy, not RateLimit). A store outage then costs the
//     limits, not the service: choose it when availability matters more
//     than the limit, and alert on the errors.
//   - FailClosed refuses the request as unavailable: 503 Service
//     Unavailable over HTTP, codes.Unavailable over gRPC. A store outage
//     then takes the limited routes down: choose it when the limit
//     protects something that must not be overrun (a paid upstream, a
//     login form).
//
// A backend with a local fallback (the Redis backend's WithLocalFallback)
// answers an outage with decisions, not errors: a share of each limit,
// decided in process, with keyrate.Decision.Fallback set. They are served
// and refused like any other decision, so the failure mode applies only
// when even the fallback cannot decide.
//
// Neither applies to a request that could not be placed (an error
// matching keyrate.ErrInvalidKey: 400 Bad Request, codes.InvalidArgument)
// or whose client had gone (ErrClientGone: 503 over HTTP, the call's own
// codes.Canceled or codes.DeadlineExceeded over gRPC): both are refused in
// either mode (see the package documentation).
type FailureMode int

const (
	// FailOpen serves the request when the store is unavailable.
	FailOpen FailureMode = iota
	// FailClosed refuses the request as unavailable when the store is.
	FailClosed
)
