package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/otellimit"
)

// telemetry says where the demo exports keyrate's OpenTelemetry metrics
// (package otellimit): to the output, by OTLP, both, or nowhere (the
// default: then no provider is made at all).
type telemetry struct {
	// Stdout writes every export to the demo's output, one JSON document a
	// line.
	Stdout bool
	// OTLPEndpoint is an OTLP/HTTP endpoint's base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT gives one ("http://127.0.0.1:4318"):
	// metrics go to its /v1/metrics. "" leaves it to the standard
	// variables: OTLP when OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set, none otherwise.
	OTLPEndpoint string
	// Interval is the time between exports; 0 is defaultExportInterval.
	// The last export is made at shutdown, whatever the interval.
	Interval time.Duration
	// Getenv reads the environment; nil is no environment at all, so that
	// a test's demo never exports because of the machine it runs on.
	Getenv func(string) string
}

// defaultExportInterval is short, for a demo: the SDK's own default is a
// minute.
const defaultExportInterval = 10 * time.Second

// The standard variables that name an OTLP endpoint, and the protocol.
var (
	otlpEndpointVars = []string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}
	otlpProtocolVars = []string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"}
)

func (t telemetry) getenv(k string) string {
	if t.Getenv == nil {
		return ""
	}
	return t.Getenv(k)
}

// otlp reports whether metrics go by OTLP: to the flag's endpoint, else
// to the one the standard variables name.
func (t telemetry) otlp() bool {
	if t.OTLPEndpoint != "" {
		return true
	}
	for _, k := range otlpEndpointVars {
		if t.getenv(k) != "" {
			return true
		}
	}
	return false
}

// describe says where the metrics go, for the start-up hints.
func (t telemetry) describe() string {
	var to []string
	if t.Stdout {
		to = append(to, "this output, as JSON lines")
	}
	switch {
	case t.OTLPEndpoint != "":
		to = append(to, "OTLP at "+t.OTLPEndpoint)
	case t.otlp():
		to = append(to, "OTLP, at the endpoint OTEL_EXPORTER_OTLP_*ENDPOINT names")
	}
	if len(to) == 0 {
		return ""
	}
	s := to[0]
	if len(to) == 2 {
		s += " and " + to[1]
	}
	return fmt.Sprintf("OpenTelemetry metrics (otellimit) go to %s every %v.\n", s, t.interval())
}

func (t telemetry) interval() time.Duration {
	if t.Interval > 0 {
		return t.Interval
	}
	return defaultExportInterval
}

// start makes the MeterProvider and keyrate's Metrics on it, exporting as t
// says, writing to out for Stdout (out must take concurrent writes); nil
// Metrics when t exports nowhere.
// shutdown makes the last export and stops the provider.
func (t telemetry) start(ctx context.Context, out io.Writer) (m *otellimit.Metrics, shutdown func(context.Context) error, err error) {
	var opts []sdkmetric.Option
	if t.Stdout {
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(out))
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(t.interval()))))
	}
	if t.otlp() {
		exp, err := t.otlpExporter(ctx)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(t.interval()))))
	}
	if len(opts) == 0 {
		return nil, func(context.Context) error { return nil }, nil
	}
	// The service is keyrate-demo unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES says otherwise, read after it.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "keyrate-demo")), resource.WithFromEnv())
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithResource(res))...)
	if m, err = otellimit.New(mp); err != nil {
		mp.Shutdown(ctx)
		return nil, nil, err
	}
	return m, mp.Shutdown, nil
}

// otlpExporter returns the OTLP/HTTP exporter. The demo speaks OTLP over
// HTTP (http/protobuf) only, so a protocol variable asking for another is
// an error, not an export that silently goes nowhere.
func (t telemetry) otlpExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	for _, k := range otlpProtocolVars {
		if p := t.getenv(k); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%s=%s: the demo exports OTLP over HTTP only (http/protobuf, port 4318 by default)", k, p)
		}
	}
	var opts []otlpmetrichttp.Option
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("-otlp-endpoint %q: want an http or https URL such as http://127.0.0.1:4318", t.OTLPEndpoint)
		}
		opts = append(opts, otlpmetrichttp.WithEndpointURL(u.JoinPath("v1/metrics").String()))
	}
	// Without the flag the exporter reads the standard variables itself,
	// with their standard meaning.
	return otlpmetrichttp.New(ctx, opts...)
}

// observers tells each of its Observers of every request, in order: a
// middleware takes one.
type observers []middleware.Observer

func (o observers) Observe(ev middleware.Event) {
	for _, x := range o {
		x.Observe(ev)
	}
}

// lockedWriter serializes the writes of everything that shares the demo's
// output (the decision log, the metrics exporter), so that each line stays
// whole: an export is one line of JSON, and can be longer than a pipe
// writes at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
