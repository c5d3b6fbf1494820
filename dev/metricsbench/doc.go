// Package metricsbench measures keyrate's two metrics Observers side by
// side, in one run: promlimit's (Prometheus) and otellimit's
// (OpenTelemetry, on the SDK), alone and behind httplimit. It has no code
// but its benchmarks; see README.md for a run's figures.
package metricsbench
