package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// seenBy returns a backend that admits everything and records, for each
// call, what a tier function would see: the identity its context carries,
// else the key.
func seenBy(seen *[]string) backend.Func {
	return func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		id, ok := backend.IdentityFromContext(ctx)
		if !ok {
			id = key
		}
		*seen = append(*seen, id)
		return keyrate.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
	}
}

// A tier function sees the client's identity as the client sent it: never
// the route, HeaderKey's header name or the digest of a long identity.
func TestTierSeesIdentityAsSent(t *testing.T) {
	apiKey := httplimit.HeaderKey("X-Api-Key", nil)
	long := "pro-" + strings.Repeat("k", 196)
	tenant := func(r *http.Request) (string, error) { return "tenant:" + r.Header.Get("Tenant"), nil }
	cases := []struct {
		name   string
		key    httplimit.KeyFunc // nil: the default
		remote string
		header []string
		want   string
	}{
		{"default address", nil, "192.0.2.1:1234", nil, "192.0.2.1"},
		{"default IPv6 address", nil, "[2001:db8:1:2::9]:1234", nil, "2001:db8:1:2::/64"},
		{"API key", apiKey, "192.0.2.1:1234", []string{"X-Api-Key", "pro-42"}, "pro-42"},
		{"long API key, limited under its digest", apiKey, "192.0.2.1:1234", []string{"X-Api-Key", long}, long},
		{"API key holding a colon", apiKey, "192.0.2.1:1234", []string{"X-Api-Key", "pro:42"}, "pro:42"},
		{"no API key: the fallback's address", apiKey, "192.0.2.1:1234", nil, "192.0.2.1"},
		// An address stays whole, whatever the client sends.
		{"fallback IPv6 address", apiKey, "[2001:db8:1:2::9]:1234", []string{"2001", "db8:1:2::/64"}, "2001:db8:1:2::/64"},
		{"own KeyFunc", tenant, "192.0.2.1:1234", []string{"Tenant", "alice"}, "tenant:alice"},
		// An identity of HeaderKey's form is HeaderKey's only when the
		// request carries the header with that value.
		{"own KeyFunc in HeaderKey's form", func(*http.Request) (string, error) { return "x-api-key=pro-42", nil }, "192.0.2.1:1234", nil, "x-api-key=pro-42"},
		{"Join", httplimit.Join(apiKey, tenant), "192.0.2.1:1234", []string{"X-Api-Key", "pro-42", "Tenant", "alice"}, "x-api-key=pro-42\x00tenant:alice"},
	}
	for _, tc := range cases {
		var seen []string
		opts := []httplimit.Option{httplimit.WithRoute("search")}
		if tc.key != nil {
			opts = append(opts, httplimit.WithKeyFunc(tc.key))
		}
		var keys []string
		opts = append(opts, httplimit.WithOnDecision(func(e middleware.Event) { keys = append(keys, e.Key) }))
		h := newHandler(t, seenBy(&seen), opts...)
		r := httptest.NewRequest("GET", "/search", nil)
		r.RemoteAddr = tc.remote
		for i := 0; i+1 < len(tc.header); i += 2 {
			r.Header.Set(tc.header[i], tc.header[i+1])
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if len(seen) != 1 || seen[0] != tc.want {
			t.Errorf("%s: the tier function would see %q, want %q", tc.name, seen, tc.want)
		}
		// The key is unchanged: the route and the identity as limited.
		if len(keys) != 1 || !strings.HasPrefix(keys[0], "search\x00") || len(keys[0]) > len("search\x00")+128 {
			t.Errorf("%s: key %q, want the route and a bounded identity", tc.name, keys)
		}
	}
}
