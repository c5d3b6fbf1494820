// Package middleware holds what a user of keyrate's middleware packages
// configures, declared once: httplimit (net/http) and grpclimit (gRPC) take
// the same FailureMode, report the same Event to their hooks and to an
// Observer, settle a request's weight through ReportWeight, take the same
// Concurrency store, and give a token budget's backend the same TokenTier.
// The machinery both share lives in middleware/adapter, for packages that
// put a keyrate.Backend behind a protocol.
//
// Every request is decided by one atomic call to a keyrate.Backend. What
// happens when that call gives no decision depends on why:
//
//   - The store is unavailable (the backend failed, or outlived the time
//     budget): the FailureMode decides, serving the request (FailOpen) or
//     refusing it as unavailable (FailClosed).
//   - The request could not be placed (keyrate.ErrInvalidKey: it carries
//     no identity that can be a key): it is refused as a bad request in
//     either mode, since a client could cause it at will.
//   - The client had gone before the request was decided (ErrClientGone):
//     it is never served, in either mode and in shadow mode, or a client
//     could have work done over its limit by giving up on its requests.
//
// In shadow mode (httplimit.WithShadow, grpclimit.WithShadow) a middleware
// decides, records and reports as usual but refuses nothing, save a
// request whose client has gone: a refusal is served, and so is a request
// that would have been refused for an error, each reported with
// Event.Shadow set.
package middleware
