// Package grpclimit rate-limits gRPC calls per client and per method, in
// front of any keyrate.Backend: the in-process *keyrate.Limiter or a
// networked store such as the Redis backend.
//
// A Limiter gives every method its own budget: the full method name
// ("/pkg.Service/Method") is the route, and prefixes every key sent to the
// backend. The client is the value of a metadata key (WithMetadataKey: an
// API key, say, "x-api-key=alice" as httplimit.HeaderKey has it too) or
// else the peer's IP address, IPv6 grouped by /64. A unary
// call is decided before its handler runs; a stream is decided once, when it
// opens, whatever it sends afterwards.
//
// A refused call fails with codes.ResourceExhausted and a
// google.rpc.RetryInfo detail whose delay is exactly how long until the call
// would fit every policy. Every decided call carries the IETF RateLimit
// fields as response header metadata, with the same values as httplimit's
// HTTP fields, the method in place of the route:
//
//	ratelimit-policy: "/pkg.Service/Method";q=20;w=60
//	ratelimit: "/pkg.Service/Method";r=19;t=3
//
// A backend with several policies per key (keyrate.NewPolicies) gets a
// member for each, named after the method and the policy:
//
//	ratelimit-policy: "second";q=10;w=1, "day";q=1000;w=86400
//	ratelimit: "second";r=9;t=1, "day";r=990;t=51840
//
// When the backend fails or outlives its time budget (250ms by default),
// the call is either served (middleware.FailOpen, the default) or fails
// with codes.Unavailable (middleware.FailClosed). An error caused by the
// call itself (an identity the backend cannot use as a key) fails it with
// codes.InvalidArgument in either mode: a client able to provoke it must
// not go unlimited. A call whose client has gone before it is decided (it
// cancelled the call, reset the stream, or its deadline passed) is not
// decided and never served, in either mode and in shadow mode: it fails
// with its context's status, codes.Canceled or codes.DeadlineExceeded,
// which the client has stopped waiting for; OnError and the Observer hear
// of it as middleware.ErrClientGone. Serving it would let a client have
// work done over its limit by giving up on its calls. WithShadow tries a
// limit out without enforcing it: every call is decided and reported, and
// none is refused, save one whose client has gone.
//
// A weight may be an estimate (WithWeight), reserved before the work and
// settled after it: the handler reports what the call really weighed with
// middleware.ReportWeight, and the rest goes back when it returns, as
// WithRefund gives a whole call back by its status code. The header
// metadata, sent before the handler runs, says what was reserved.
//
// The options httplimit and grpclimit share (WithWeight, WithTimeBudget,
// WithFailureMode, WithShadow, WithOnDecision, WithOnLimited, WithOnError,
// WithObserver) mean the same in both, and the hooks and the Observer get
// the same middleware.Event: its Route is the full method name and its
// Context the call's.
//
// A backend's tier function (keyrate.WithTiers) sees the client's identity
// as the client sent it: the metadata key's value, whatever its length, or
// the peer's address; never the method or the metadata key's name (see
// backend.ContextWithIdentity).
//
// Install both interceptors, so that unary and streaming methods alike are
// limited:
//
//	l, _ := keyrate.New(20, time.Minute)
//	lim, _ := grpclimit.New(l, grpclimit.WithMetadataKey("x-api-key"))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.Unary()),
//		grpc.ChainStreamInterceptor(lim.Stream()),
//	)
//
// Metrics: github.com/keyrate/keyrate/promlimit's Metrics is a
// middleware.Observer; pass it to WithObserver.
package grpclimit
