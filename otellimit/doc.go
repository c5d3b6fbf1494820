// Package otellimit exports what keyrate's middleware decides as
// OpenTelemetry metrics, through a metric.MeterProvider of the caller's
// choosing (the SDK's, exporting by OTLP, or any other):
//
//	keyrate.requests          counter {request}: keyrate.route, keyrate.result (allowed, limited, shadow_limited, error, client_gone)
//	keyrate.decisions         counter {decision}: keyrate.route, keyrate.source (store, fallback: a local fallback decided while the store was down)
//	keyrate.backend.duration  histogram, s: keyrate.route; the backend's decision time
//	keyrate.backend.errors    counter {error}: keyrate.route, error.type (timeout, unavailable, oom, invalid, refund)
//	keyrate.policy.violations counter {violation}: keyrate.route, keyrate.policy; a refusal once for each policy that refused it
//	keyrate.keys              gauge {key}: keyrate.route; keys an in-process Limiter tracks
//
// These are the series of github.com/keyrate/keyrate/promlimit, with the
// same meaning, in OpenTelemetry's naming. *Metrics is a
// middleware.Observer: pass it to httplimit.WithObserver or
// grpclimit.WithObserver. otellimit imports neither gRPC nor Prometheus.
//
// Attribute values are route names, policy names (from the backend's
// configuration, at most 32 per route) and fixed words, never anything a
// client sends: no identity, key, address or header. Routes are bounded
// too (WithMaxRoutes), since gRPC method names reach the middleware from
// the client. Measurements carry no request context, so no exemplar ties a
// series to a trace whose identifiers a client may have chosen.
//
// Observe allocates nothing: each route's attribute sets are built once,
// on its first request.
package otellimit
