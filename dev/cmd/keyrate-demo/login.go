package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
)

// demoPassword is the one password /api/login accepts. It guards nothing:
// it is printed in the start-up hints and the README, so that a login that
// succeeds, and is given back, is one command away.
const demoPassword = "keyrate"

// maxLoginBody bounds what /api/login reads of a request: a password form
// is a few dozen bytes.
const maxLoginBody = 4 << 10

// countsNot is /api/login's refund rule (httplimit.WithRefund): an answer
// below 400, a login that succeeded, gives its attempt back, so that only
// failed attempts count, bad requests among them.
func countsNot(status int) bool { return status < http.StatusBadRequest }

// serveLogin checks the password of a form (password=...) or of a JSON
// object ({"password": "..."}): 200 when it is demoPassword, 401 when it is
// another, 400 for a body it cannot read.
func serveLogin(w http.ResponseWriter, r *http.Request) {
	password, err := readPassword(w, r)
	switch {
	case err != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"login": "failed", "error": err.Error()})
	case subtle.ConstantTimeCompare([]byte(password), []byte(demoPassword)) != 1:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"login": "failed", "error": "wrong password"})
	default:
		writeJSON(w, map[string]any{"login": "ok", "time": time.Now().UTC().Format(time.RFC3339)})
	}
}

// readPassword reads the password of r's body: a JSON object when the
// Content-Type says application/json, a form otherwise.
func readPassword(w http.ResponseWriter, r *http.Request) (string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType == "application/json" {
		var body struct {
			Password *string `json:"password"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return "", errors.New(`the body is not a JSON object such as {"password": "..."}`)
		}
		if body.Password == nil {
			return "", errors.New(`no "password" in the JSON body`)
		}
		return *body.Password, nil
	}
	if err := r.ParseForm(); err != nil {
		return "", errors.New("the body is not a form such as password=...")
	}
	if !r.PostForm.Has("password") {
		return "", errors.New("no password field in the form")
	}
	return r.PostForm.Get("password"), nil
}

// refundable is a budget whose events can be given back: the in-process
// Limiter and the Redis one are both, and both bound their own calls and
// list their policies, which the middleware reads.
type refundable interface {
	keyrate.Backend
	keyrate.Bounded
	keyrate.PolicyLister
}

// refundReporter is a budget whose attempts the middleware may give back
// (httplimit.WithRefund): each refund it makes is published like a
// decision, so that the log and the page show the attempt no longer counts.
type refundReporter struct {
	refundable
	refund  func(ctx context.Context, key string, d *keyrate.Decision) error
	route   string
	publish func(decision)
}

// newRefundReporter returns b, which must be an in-process or a Redis
// Limiter, as a refundReporter.
func newRefundReporter(b keyrate.Backend, route string, publish func(decision)) (refundReporter, error) {
	r := refundReporter{route: route, publish: publish}
	switch l := b.(type) {
	case *keyrate.Limiter:
		r.refundable = l
		r.refund = func(_ context.Context, key string, d *keyrate.Decision) error { return l.Refund(key, d) }
	case *redislimit.Limiter:
		r.refundable, r.refund = l, l.Refund
	default:
		return r, fmt.Errorf("route %s: a budget of %T cannot give attempts back", route, b)
	}
	return r, nil
}

// Refund gives back the events of the admitted decision *d for key, as the
// budget's own Refund does, and publishes that it did, with the key's
// budget as it then stands.
func (r refundReporter) Refund(ctx context.Context, key string, d *keyrate.Decision) error {
	receipt := d.Receipt // Refund consumes it
	if err := r.refund(ctx, key, d); err != nil {
		return err
	}
	// httplimit asks about route + "\x00" + the client's identity.
	identity := strings.TrimPrefix(key, r.route+"\x00")
	after, err := r.TakeContext(ctx, key, 0) // as the key stands: a weight of 0 records nothing
	if err != nil {
		return nil // given back; only the page misses how the key stands
	}
	r.publish(decision{
		At:       time.Now(),
		Route:    r.route,
		Key:      shownIdentity(identity),
		Decision: after,
		Refund:   &receipt,
	})
	return nil
}
