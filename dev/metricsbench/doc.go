// Package metricsbench measures keyrate's two metrics Observers side by
// side, in one run: promlimit's (Prometheus) and otellimit's
// (OpenTelemetry, on the SDK), alone and behind httplimit, and checks that
// both count by the same words (TestLabelValuesAgree). It has no code but
// its tests; see README.md for a run's figures.
package metricsbench
