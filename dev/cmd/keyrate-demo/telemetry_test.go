package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// runDemo runs the demo with cfg on a free port of 127.0.0.1 and returns
// its base URL, and stop, which ends it and returns everything it wrote.
func runDemo(t *testing.T, cfg config) (base string, stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, "127.0.0.1:0", cfg, w)
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	lines.Buffer(nil, 1<<20) // an export is one long line
	require.True(t, lines.Scan(), "no output")
	base, ok := strings.CutPrefix(lines.Text(), "keyrate-demo listening on ")
	require.True(t, ok, "first line %q", lines.Text())
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	var once sync.Once
	var out string
	stop = func() string {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
			out = <-rest
		})
		return out
	}
	t.Cleanup(func() { stop() })
	return base, stop
}

// statusFour asks for /api/status four times from one client: 3 allowed,
// 1 limited.
func statusFour(t *testing.T, base string) {
	t.Helper()
	var codes []int
	for range 4 {
		resp, err := http.Get(base + "/api/status")
		require.NoError(t, err)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	require.Equal(t, []int{200, 200, 200, 429}, codes)
}

// By default the demo makes no OpenTelemetry provider, and says nothing of
// one: not even a machine whose environment names a collector changes that
// in a test, which reads no environment.
func TestTelemetryOff(t *testing.T) {
	m, shutdown, err := telemetry{}.start(t.Context(), io.Discard)
	require.NoError(t, err)
	assert.Nil(t, m)
	assert.NoError(t, shutdown(t.Context()))
	assert.Empty(t, telemetry{}.describe())

	base, stop := runDemo(t, config{})
	statusFour(t, base)
	out := stop()
	assert.NotContains(t, out, "OpenTelemetry")
	assert.NotContains(t, out, "keyrate.requests")
}

// jsonExport is the part of stdoutmetric's JSON that the test reads.
type jsonExport struct {
	ScopeMetrics []struct {
		Scope   struct{ Name string }
		Metrics []struct {
			Name string
			Data struct {
				DataPoints []struct {
					Attributes []struct {
						Key   string
						Value struct{ Value any }
					}
					Value float64
				}
			}
		}
	}
}

// With -otel-stdout, the last export, made at shutdown, is a line of JSON
// on the output that counts every request by route and result.
func TestTelemetryStdout(t *testing.T) {
	base, stop := runDemo(t, config{Telemetry: telemetry{Stdout: true}})
	statusFour(t, base)
	out := stop()
	assert.Contains(t, out, "OpenTelemetry metrics (otellimit) go to this output, as JSON lines every 10s.")

	var export *jsonExport
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "{") {
			export = new(jsonExport)
			require.NoError(t, json.Unmarshal([]byte(line), export), line)
		}
	}
	require.NotNil(t, export, "no JSON export in:\n%s", out)
	got := map[string]float64{}
	for _, sm := range export.ScopeMetrics {
		if sm.Scope.Name != "github.com/keyrate/keyrate/otellimit" {
			continue
		}
		for _, m := range sm.Metrics {
			for _, p := range m.Data.DataPoints {
				var attrs []string
				for _, a := range p.Attributes {
					attrs = append(attrs, a.Key+"="+a.Value.Value.(string))
				}
				got[m.Name+"{"+strings.Join(attrs, ",")+"}"] = p.Value
			}
		}
	}
	assert.Equal(t, 3.0, got["keyrate.requests{keyrate.result=allowed,keyrate.route=status}"], "%v", got)
	assert.Equal(t, 1.0, got["keyrate.requests{keyrate.result=limited,keyrate.route=status}"])
	assert.Equal(t, 4.0, got["keyrate.decisions{keyrate.route=status,keyrate.source=store}"])
	assert.Equal(t, 1.0, got["keyrate.policy.violations{keyrate.policy=,keyrate.route=status}"])
	assert.Equal(t, 1.0, got["keyrate.keys{keyrate.route=status}"])
}

// collector is an OTLP/HTTP receiver on loopback that keeps the requests
// it was sent.
type collector struct {
	*httptest.Server
	mu  sync.Mutex
	got []*colmetricpb.ExportMetricsServiceRequest
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := new(colmetricpb.ExportMetricsServiceRequest)
		if r.Method != "POST" || r.URL.Path != "/v1/metrics" || err != nil || proto.Unmarshal(body, req) != nil {
			http.Error(w, "want an OTLP/HTTP export to /v1/metrics", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.got = append(c.got, req)
		c.mu.Unlock()
		resp, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	}))
	t.Cleanup(c.Close)
	return c
}

// sums returns the latest value of each counter's data point of
// otellimit's scope, by name and attributes, and the service's name.
func (c *collector) sums() (got map[string]int64, service string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	got = map[string]int64{}
	for _, req := range c.got {
		for _, rm := range req.ResourceMetrics {
			for _, a := range rm.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, sm := range rm.ScopeMetrics {
				if sm.GetScope().GetName() != "github.com/keyrate/keyrate/otellimit" {
					continue
				}
				for _, m := range sm.Metrics {
					for _, p := range m.GetSum().GetDataPoints() {
						var attrs []string
						for _, a := range p.Attributes {
							attrs = append(attrs, a.Key+"="+a.GetValue().GetStringValue())
						}
						got[m.Name+"{"+strings.Join(attrs, ",")+"}"] = p.GetAsInt()
					}
				}
			}
		}
	}
	return got, service
}

// With -otlp-endpoint, or the standard variable instead, the metrics go by
// OTLP over HTTP to that endpoint's /v1/metrics.
func TestTelemetryOTLP(t *testing.T) {
	for _, tc := range []struct {
		name string
		tel  func(t *testing.T, url string) telemetry
	}{
		{"the flag", func(t *testing.T, url string) telemetry { return telemetry{OTLPEndpoint: url} }},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", func(t *testing.T, url string) telemetry {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
			return telemetry{Getenv: func(k string) string {
				if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
					return url
				}
				return ""
			}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCollector(t)
			base, stop := runDemo(t, config{Telemetry: tc.tel(t, c.URL)})
			statusFour(t, base)
			out := stop()
			assert.Contains(t, out, "OpenTelemetry metrics (otellimit) go to OTLP")
			got, service := c.sums()
			assert.Equal(t, "keyrate-demo", service)
			assert.Equal(t, int64(3), got["keyrate.requests{keyrate.result=allowed,keyrate.route=status}"], "%v", got)
			assert.Equal(t, int64(1), got["keyrate.requests{keyrate.result=limited,keyrate.route=status}"])
			assert.Equal(t, int64(4), got["keyrate.decisions{keyrate.route=status,keyrate.source=store}"])
		})
	}
}

// A bad endpoint or a protocol the demo does not speak is an error at
// start, not an export that silently goes nowhere.
func TestTelemetryErrors(t *testing.T) {
	for _, tel := range []telemetry{
		{OTLPEndpoint: "127.0.0.1:4318"},
		{OTLPEndpoint: "ftp://collector:4318"},
		{OTLPEndpoint: "http://"},
		{OTLPEndpoint: "http://127.0.0.1:4318", Getenv: func(k string) string {
			if k == "OTEL_EXPORTER_OTLP_PROTOCOL" {
				return "grpc"
			}
			return ""
		}},
	} {
		_, _, err := tel.start(t.Context(), io.Discard)
		assert.Error(t, err, "%+v", tel)
	}
}
