package metricsbench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/otellimit"
	"github.com/keyrate/keyrate/promlimit"
)

// promlimit and otellimit keep their own copies of the words they count
// by (results, sources, error kinds): each route's series hold every one
// of them from its first request, and the two Observers' are the same.
func TestLabelValuesAgree(t *testing.T) {
	ev := middleware.Event{Route: "r", Key: "k", Decision: keyrate.Decision{Allowed: true}, Duration: time.Microsecond}

	reg := prometheus.NewRegistry()
	pm, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm.Observe(ev)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	prom := map[string][]string{} // "metric label" -> values
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				prom[f.GetName()+" "+lp.GetName()] = append(prom[f.GetName()+" "+lp.GetName()], lp.GetValue())
			}
		}
	}

	mr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(mr))
	defer mp.Shutdown(context.Background())
	om, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	om.Observe(ev)
	var rm metricdata.ResourceMetrics
	if err := mr.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	otel := map[string][]string{} // "instrument key" -> values
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				for _, kv := range p.Attributes.ToSlice() {
					otel[m.Name+" "+string(kv.Key)] = append(otel[m.Name+" "+string(kv.Key)], kv.Value.AsString())
				}
			}
		}
	}

	for _, c := range []struct{ prom, otel string }{
		{"keyrate_requests_total result", "keyrate.requests keyrate.result"},
		{"keyrate_decisions_total source", "keyrate.decisions keyrate.source"},
		{"keyrate_backend_errors_total kind", "keyrate.backend.errors error.type"},
	} {
		p, o := slices.Sorted(slices.Values(prom[c.prom])), slices.Sorted(slices.Values(otel[c.otel]))
		if len(p) == 0 || !slices.Equal(p, o) {
			t.Errorf("%s: %q; %s: %q, want the same words", c.prom, p, c.otel, o)
		}
	}
}
