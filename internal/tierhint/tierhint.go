// Package tierhint tells middleware.Caller whether a backend can use the
// client identity it would put in a context (keyrate.ContextWithIdentity),
// so that it spends the allocation only where the identity may be read.
// The root package answers for its own *keyrate.Limiter, which reads it
// only when it has a tier function, and can never gain one later; that
// answer stays out of keyrate's exported API.
package tierhint

// ReadsIdentity reports whether backend b may read the identity a context
// carries. The root package replaces it when it is initialised; it answers
// true for any backend it does not know.
var ReadsIdentity = func(b any) bool { return true }
