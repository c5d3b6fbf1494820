package redislimit_test

import (
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backendtest"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// TestIdentitiesSuite checks behind httplimit that no identity a client
// sends lifts its limit on Redis: long ones are limited under their digest,
// never refused as invalid keys nor let through as store failures, and an
// empty one is a client error.
func TestIdentitiesSuite(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	backendtest.RunIdentities(t, func(t *testing.T, limit int, window time.Duration, clock *keyrate.ManualClock) keyrate.Backend {
		l, err := redislimit.New(client, limit, window, redislimit.WithPrefix(uniquePrefix()), redislimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
