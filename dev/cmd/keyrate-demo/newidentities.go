package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/clientkey"
	"github.com/keyrate/keyrate/httplimit"
)

// newIdentityLimit new API keys per newIdentityWindow is what one address
// may bring to a route's in-process limiter. A person trying keys by hand,
// or keyrate-load with a few keys, stays well inside it; a script minting
// keys from one address gets 20 a minute in, where it could otherwise mint
// 100,000 in seconds and push every idle client's events out of the
// route's bounded limiter (see keyrate.WithMaxKeys).
const (
	newIdentityLimit  = 20
	newIdentityWindow = time.Minute
)

// unreadableAddress is the one budget of the requests whose address
// cannot be read (a listener that is not TCP): they share it rather than
// go uncounted.
const unreadableAddress = "unreadable address"

// newIdentities charges a client's address for each API key it brings
// that a route's limiter holds no events for: a key it has never seen, or
// not within a window. Requests identified by their address, and keys the
// limiter knows, pass free. Over the budget, the request is refused with a
// 429 of its own before the route's limiter sees it, so the key is never
// stored.
//
// A key is charged once, however many of its first requests arrive
// together: the ones that find the route's limiter still without its
// first event find the charge recorded in charged, and pass.
type newIdentities struct {
	identity httplimit.KeyFunc // the routes' KeyFunc
	address  httplimit.KeyFunc // the client's address, as the routes read it

	mu      sync.Mutex       // makes finding a key uncharged and charging it one step
	budget  *keyrate.Limiter // new identities, per address
	charged *keyrate.Limiter // address, route and identity, for each charge within the window
}

// handler returns next behind the budget, for the route whose limiter is
// l. httplimit asks l about route + "\x00" + the bounded identity, and
// suffix after it: a token budget's requests key (adapter.RequestsSuffix),
// which every admitted request counts against, or "".
func (n *newIdentities) handler(route, suffix string, l *keyrate.Limiter, next http.Handler) http.Handler {
	prefix := route + "\x00"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := n.identity(r)
		if err != nil || !strings.HasPrefix(id, keyPrefix) {
			// Identified by address, or not at all: the route's
			// middleware answers that.
			next.ServeHTTP(w, r)
			return
		}
		key := prefix + clientkey.Bound(id) + suffix
		if !unseen(l.Peek(key)) {
			next.ServeHTTP(w, r)
			return
		}
		addr, err := n.address(r)
		if err != nil {
			addr = unreadableAddress
		}
		d := n.charge(addr, addr+"\x00"+key)
		if d.Allowed {
			next.ServeHTTP(w, r)
			return
		}
		wait := strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10)
		w.Header().Set("Retry-After", wait)
		writeProblem(w, http.StatusTooManyRequests,
			"Too many new identities from this address: at most "+strconv.Itoa(newIdentityLimit)+
				" new API keys per "+strconv.FormatFloat(newIdentityWindow.Seconds(), 'f', -1, 64)+" s; retry in "+wait+" seconds.")
	})
}

// charge takes one new identity from addr's budget for the identity key
// (address, route and identity), unless that key was charged within the
// window, which is then admitted again.
func (n *newIdentities) charge(addr, key string) keyrate.Decision {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d := n.charged.Peek(key); !d.Allowed {
		return keyrate.Decision{Allowed: true}
	}
	d := n.budget.Take(addr, 1)
	if d.Allowed {
		n.charged.Allow(key)
	}
	return d
}

// unseen reports whether a Peek found a key with no event in any of its
// policies' windows: one more event would leave every limit whole but for
// that event. A key holding events would have less left, or be refused.
func unseen(d keyrate.Decision) bool {
	if !d.Allowed {
		return false
	}
	for _, p := range d.Policies() {
		if p.Remaining != p.Limit-1 {
			return false
		}
	}
	return true
}

// writeProblem writes an RFC 9457 problem body of type about:blank, as
// httplimit does for the refusals it writes.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(status), status, detail})
}
