package httplimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/backendtest"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// storeKeyLimit is the longest key storeKeyRules accepts: a store that
// refuses long keys, as the Redis backend did before it hashed them.
const storeKeyLimit = 1024

// storeKeyRules returns a backend with strict rules for keys, in front of
// b: an empty key or one over storeKeyLimit bytes is an error
// wrapping keyrate.ErrInvalidKey, anything else goes to b.
func storeKeyRules(b keyrate.Backend) backend.Func {
	return func(ctx context.Context, key string, n int) (keyrate.Decision, error) {
		switch {
		case key == "":
			return keyrate.Decision{}, fmt.Errorf("%w: empty key", keyrate.ErrInvalidKey)
		case len(key) > storeKeyLimit:
			return keyrate.Decision{}, fmt.Errorf("%w: key is %d bytes, want at most %d", keyrate.ErrInvalidKey, len(key), storeKeyLimit)
		}
		return b.TakeContext(ctx, key, n)
	}
}

// No identity a client sends lifts its limit: not a long one, which a store
// may refuse as invalid, nor an empty one.
func TestClientCannotLiftItsLimit(t *testing.T) {
	t.Run("in-process", func(t *testing.T) {
		backendtest.RunIdentities(t, func(t *testing.T, limit int, window time.Duration, _ *keyrate.ManualClock) keyrate.Backend {
			l, _ := newLimiter(t, limit, window)
			return l
		})
	})
	t.Run("store key rules", func(t *testing.T) {
		backendtest.RunIdentities(t, func(t *testing.T, limit int, window time.Duration, _ *keyrate.ManualClock) keyrate.Backend {
			l, _ := newLimiter(t, limit, window)
			return storeKeyRules(l)
		})
	})
}

// A long identity reaches the backend and the hooks as its SHA-256 form,
// behind the route; a short one as it is.
func TestLongIdentityIsHashed(t *testing.T) {
	l, _ := newLimiter(t, 3, time.Minute)
	var events []middleware.Event
	h := newHandler(t, l, httplimit.WithRoute("api"),
		httplimit.WithKeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("Identity"), nil }),
		httplimit.WithOnDecision(func(e middleware.Event) { events = append(events, e) }))
	long := strings.Repeat("k", 129)
	get(h, "/", "Identity", long)
	get(h, "/", "Identity", strings.Repeat("k", 128))
	sum := sha256.Sum256([]byte(long))
	want := "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
	if len(events) != 2 || events[0].Identity != want || events[0].Key != "api\x00"+want {
		t.Fatalf("events %+v, want identity %q", events, want)
	}
	if e := events[1]; e.Identity != strings.Repeat("k", 128) || e.Key != "api\x00"+e.Identity {
		t.Fatalf("a 128-byte identity became %q (key %q), want it unchanged", e.Identity, e.Key)
	}
}
