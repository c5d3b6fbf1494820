// Package tokenkey names the keys of a token budget's two budgets, for
// middleware (the user's tier and hash-tag functions) and its adapter
// package (the hits) alike.
package tokenkey

// A token budget decides each request against two keys of one backend:
// the request's key with RequestsSuffix, at a weight of 1, and with
// TokensSuffix, at the request's weight.
const (
	RequestsSuffix = "/requests"
	TokensSuffix   = "/tokens"
)
