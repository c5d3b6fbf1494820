package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/keyrate/keyrate"
)

// t0 is where every manual clock starts: a whole second, so that the
// instants tests move to are whole ticks and durations come out exact.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness is a service over an in-process store on a manual clock.
type harness struct {
	svc   *service
	clock *keyrate.ManualClock
	m     *metrics
	log   *syncBuffer
}

// newHarness returns a service that has loaded config, YAML text or the
// name of a file in testdata.
func newHarness(t testing.TB, config string) *harness {
	t.Helper()
	clock := keyrate.NewManualClock(t0)
	st, err := newLimiterStore(0, clock, minMaxWindow)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, st, config, serviceOptions{clock: clock})
	h.clock = clock
	return h
}

// newHarnessOn returns a service over st that has loaded config, and
// closes st when t ends.
func newHarnessOn(t testing.TB, st store, config string) *harness {
	t.Helper()
	return newHarnessWith(t, st, config, serviceOptions{})
}

// newHarnessWith is newHarnessOn with the service's options.
func newHarnessWith(t testing.TB, st store, config string, opts serviceOptions) *harness {
	t.Helper()
	t.Cleanup(func() { st.Close() })
	h := &harness{log: &syncBuffer{}}
	rs, err := parseConfig("rules.yaml", []byte(fixture(t, config)))
	if err != nil {
		t.Fatal(err)
	}
	if h.m, err = newMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(h.log, nil))
	if h.svc, err = newService(st, h.m, log, rs, opts); err != nil {
		t.Fatal(err)
	}
	return h
}

// fixture returns config itself, or the content of testdata/config when
// it names a YAML file there.
func fixture(t testing.TB, config string) string {
	t.Helper()
	if !strings.HasSuffix(config, ".yaml") || strings.Contains(config, "\n") {
		return config
	}
	data, err := os.ReadFile(filepath.Join("testdata", config))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// desc returns a descriptor of the given keys and values, alternating.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(domain string, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// ask decides req and summarises the answer (see summary).
func (h *harness) ask(t testing.TB, req *rlspb.RateLimitRequest) string {
	t.Helper()
	resp, err := h.svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return summary(resp)
}

// summary writes a response on one line: the overall code, then each
// status as "code remaining/limit unit [name] t=duration_until_reset", or
// the code alone when it has no limit, "code r=remaining" when unlimited.
func summary(resp *rlspb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.GetOverallCode().String())
	for _, s := range resp.GetStatuses() {
		b.WriteString(" | ")
		b.WriteString(s.GetCode().String())
		cl := s.GetCurrentLimit()
		switch {
		case cl != nil:
			unit := cl.GetUnit().String()
			if m := cl.GetUnitMultiplier(); m != nil {
				unit = fmt.Sprintf("%dx%s", m.GetValue(), unit)
			}
			fmt.Fprintf(&b, " %d/%d %s", s.GetLimitRemaining(), cl.GetRequestsPerUnit(), unit)
			if cl.GetName() != "" {
				fmt.Fprintf(&b, " %s", cl.GetName())
			}
			if d := s.GetDurationUntilReset(); d != nil {
				fmt.Fprintf(&b, " t=%v", d.AsDuration())
			}
		case s.GetLimitRemaining() != 0:
			fmt.Fprintf(&b, " r=%d", s.GetLimitRemaining())
		}
	}
	return b.String()
}

// counter returns a rule counter's value: name is envoyproxy/ratelimit's
// stat (total_hits, over_limit, ...).
func (h *harness) counter(name, domain, rule string) float64 {
	vecs := map[string]*prometheus.CounterVec{
		"total_hits":   h.m.totalHits,
		"over_limit":   h.m.overLimit,
		"near_limit":   h.m.nearLimit,
		"within_limit": h.m.withinLimit,
		"shadow_mode":  h.m.shadowed,
	}
	return testutil.ToFloat64(vecs[name].WithLabelValues(domain, rule))
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
