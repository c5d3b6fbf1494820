// Package promlimit exports what keyrate's middleware decides as Prometheus
// metrics, on a registry of the caller's choosing:
//
//	keyrate_requests_total{route, result}            counter; result: allowed, limited, shadow_limited, error, client_gone
//	keyrate_decisions_total{route, source}           counter; source: store, fallback (a local fallback decided while the store was down)
//	keyrate_backend_duration_seconds{route}          histogram of the backend's decision time
//	keyrate_backend_errors_total{route, kind}        counter; kind: timeout, unavailable, oom, invalid, refund
//	keyrate_policy_violations_total{route, policy}   counter; a refusal once for each policy that refused it
//	keyrate_keys{route}                              gauge of keys an in-process Limiter tracks
//
// *Metrics is a middleware.Observer: pass it to httplimit.WithObserver or
// grpclimit.WithObserver, beside any hooks of your own. promlimit imports
// neither, so an HTTP-only program does not build gRPC.
//
// Label values are route names (at most WithMaxRoutes of them, the rest
// counted as "(other)"), policy names (from the backend's configuration,
// at most 32 per route) and fixed words, never anything
// about a client: the series a program exports are bounded by its routes
// and policies, whatever its clients send.
package promlimit
