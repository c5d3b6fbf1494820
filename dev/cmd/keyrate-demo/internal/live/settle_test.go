package live

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// refundEvent decodes a refund event of the stream.
func refundEvent(t *testing.T, e sse) event {
	t.Helper()
	if e.event != "refund" {
		t.Fatalf("event type %q, want refund (%+v)", e.event, e)
	}
	var ev event
	if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
		t.Fatalf("data %q: %v", e.data, err)
	}
	return ev
}

// A decision of a weighed request carries its weight. Settling it gives
// back part of it: the refund names the decision's receipt, the weight it
// held and what it gave back, and names what the decision still holds,
// which the next refund of it names in turn; that one, of the rest, holds
// nothing after it. A refund of nothing, or of more than the decision
// holds, is not streamed. A whole refund gives back all it held.
func TestSettleFollowsItsDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, Config{})
		s := open(h, "")
		at := time.Now()
		tokens := keyrate.Policy{Limit: 10_000, Window: time.Minute}
		budget := func(remaining int) keyrate.Decision {
			return backend.Combine(keyrate.PolicyDecision{Policy: tokens, Allowed: true, Remaining: remaining})
		}
		admitted := budget(8000)
		admitted.Receipt = backend.NewReceipt(at, 2000, 7)
		h.RecordN("status", "k", 2000, admitted, at)
		h.RecordRefundN("status", "k", admitted.Receipt, 0, budget(8000), at)
		h.RecordRefundN("status", "k", admitted.Receipt, 2001, budget(8000), at)
		h.RecordRefundN("status", "k", admitted.Receipt, 1500, budget(9500), at.Add(time.Millisecond))
		h.RecordRefundN("status", "k", backend.NewReceipt(at, 500, 7), 500, budget(10_000), at.Add(2*time.Millisecond))
		other := budget(9999)
		other.Receipt = backend.NewReceipt(at.Add(3*time.Millisecond), 1, 7)
		h.Record("status", "k", other, at.Add(3*time.Millisecond))
		h.RecordRefund("status", "k", other.Receipt, budget(10_000), at.Add(4*time.Millisecond))

		evs := parseSSE(t, s.drain())
		if got := types(evs); got != "hello d1 refund refund d4 refund" {
			t.Fatalf("stream %s, want hello d1 refund refund d4 refund", got)
		}
		decision, part, rest := decoded(t, evs[1]), refundEvent(t, evs[2]), refundEvent(t, evs[3])
		if decision.Weight != 2000 || decision.Receipt == "" || decision.Remaining != 8000 {
			t.Errorf("decision %+v, want a weight of 2000, a receipt and 8000 remaining", decision)
		}
		if part.Receipt != decision.Receipt || part.Weight != 2000 || part.Given != 1500 || part.Rest == "" || part.Rest == part.Receipt || part.Remaining != 9500 {
			t.Errorf("settle %+v, want 1500 of the decision's 2000 given back, what is left named anew, and 9500 remaining", part)
		}
		if rest.Receipt != part.Rest || rest.Weight != 500 || rest.Given != 500 || rest.Rest != "" || rest.Remaining != 10_000 {
			t.Errorf("refund of the rest %+v, want the 500 the settle left (%q), all given back", rest, part.Rest)
		}
		one, whole := decoded(t, evs[4]), refundEvent(t, evs[5])
		if one.Weight != 1 || whole.Receipt != one.Receipt || whole.Weight != 1 || whole.Given != 1 || whole.Rest != "" {
			t.Errorf("Record then RecordRefund: %+v and %+v, want a weight of 1 given back whole", one, whole)
		}
		s.cancel()
		<-s.done
	})
}

// The configuration tells the page a route's unit and the burst it offers;
// a burst the page cannot send is refused.
func TestConfigDescribesUnitsAndBursts(t *testing.T) {
	generate := Route{Name: "generate", Method: http.MethodPost, Path: "/api/generate", Policies: []keyrate.Policy{{Limit: 10_000, Window: time.Minute}},
		Refunds: true, Unit: "tokens", Burst: 5, Form: map[string]string{"max_tokens": "2000"}}
	resp := get(t, newHub(t, Config{Routes: []Route{generate}}).Handler(), http.MethodGet, ConfigPath)
	var got configJSON
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := routeJSON{Name: "generate", Method: "POST", Path: "/api/generate", Policies: []policyJSON{{Limit: 10_000, WindowMs: 60_000}},
		Refunds: true, Unit: "tokens", Burst: 5, Form: map[string]string{"max_tokens": "2000"}}
	if len(got.Routes) != 1 || !reflect.DeepEqual(got.Routes[0], want) {
		t.Errorf("routes %+v, want %+v", got.Routes, want)
	}
	for _, burst := range []int{-1, maxBurst + 1} {
		r := generate
		r.Burst = burst
		if h, err := New(Config{Routes: []Route{r}}); !errors.Is(err, ErrConfig) {
			t.Errorf("a burst of %d: New = %v, %v; want an error wrapping ErrConfig", burst, h, err)
		}
	}
}
