package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// recorder writes down, in order, what the hooks and the Observer hear.
type recorder struct{ log []string }

func (r *recorder) hook(name string) func(middleware.Event) {
	return func(ev middleware.Event) { r.log = append(r.log, name+" "+outcome(ev)) }
}

func (r *recorder) Observe(ev middleware.Event) { r.log = append(r.log, "Observer "+outcome(ev)) }

func outcome(ev middleware.Event) string {
	switch {
	case ev.Err != nil:
		return "error"
	case ev.Decision.Allowed:
		return "allowed"
	}
	return "limited"
}

// The Observer hears of every decision and every error, after the hooks,
// which it never replaces: an admission, a refusal, an identity that
// cannot be placed, a store failure and a gone client, in that order.
func TestObserverBesideHooks(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Minute)
	b := backend.Func(func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		if strings.HasSuffix(key, "=down") {
			return keyrate.Decision{}, errors.New("store down")
		}
		return l.TakeContext(ctx, key, n)
	})
	rec := &recorder{}
	h := newHandler(t, b, httplimit.WithObserver(rec),
		httplimit.WithKeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("Id"), nil }),
		httplimit.WithOnDecision(rec.hook("OnDecision")),
		httplimit.WithOnLimited(rec.hook("OnLimited")),
		httplimit.WithOnError(rec.hook("OnError")))
	get(h, "/", "Id", "id=alice")
	get(h, "/", "Id", "id=alice")
	get(h, "/", "Id", "")
	get(h, "/", "Id", "id=down")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r, _ := http.NewRequestWithContext(gone, "GET", "/", nil)
	r.Header.Set("Id", "id=bob")
	h.ServeHTTP(discardWriter{}, r)
	want := []string{
		"OnDecision allowed", "Observer allowed",
		"OnDecision limited", "OnLimited limited", "Observer limited",
		"OnError error", "Observer error",
		"OnError error", "Observer error",
		"OnError error", "Observer error",
	}
	if got := fmt.Sprint(rec.log); got != fmt.Sprint(want) {
		t.Errorf("heard %v\nwant  %v", rec.log, want)
	}
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}
