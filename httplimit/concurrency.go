package httplimit

import (
	"net/http"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/middleware/adapter"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// holdSlot takes the request's slot. It returns the slot's release, and
// whether the request goes on; when it does not, the request has been
// answered. A request that goes on without a slot (FailOpen, shadow) gets
// a release that does nothing.
func (m *Middleware) holdSlot(w http.ResponseWriter, r *http.Request, next http.Handler, ev middleware.Event, sent string) (func(), bool) {
	hold := m.slots.Hold(r.Context(), &ev, sent)
	if hold.Err != nil {
		m.fail(w, r, next, ev, hold.Err)
		return nil, false
	}
	h := w.Header()
	if hold.Policy.Name != "" && m.headers&DraftHeaders != 0 {
		h[hPolicy] = append(h[hPolicy], string(ratelimitfield.AppendPolicies(nil, []keyrate.Policy{hold.Policy}, m.route, adapter.SlotUnit)))
	}
	if !hold.Full {
		return hold.Release, true
	}
	m.setPolicy(h)
	if m.shadow {
		next.ServeHTTP(w, r)
		return nil, false
	}
	setRetryAfter(h, ratelimitfield.Seconds(ev.Decision.RetryAfter))
	m.limited(w, r, ev)
	return nil, false
}
