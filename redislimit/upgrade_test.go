package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestUpgrade fills a key through the earlier releases' sorted-set script,
// as a replica not yet upgraded would, and the same events on another key
// through the limiter: from then on the limiter decides both keys alike,
// refusing at the same instants with the same RetryAfter, so an upgrade
// forgets no event admitted before it.
func TestUpgrade(t *testing.T) { testUpgrade(t, redistest.Shared(t).Client(t)) }

func testUpgrade(t *testing.T, client redis.UniversalClient) {
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := keyrate.NewManualClock(start)
	l := newLimiter(t, client, 5, time.Minute, redislimit.WithClock(clock))
	for i := range 5 {
		clock.Set(start.Add(time.Duration(i) * time.Second))
		// The earlier script took the weight, the instant in microseconds,
		// and limit, window pairs.
		v, err := redislimit.LegacyLogScript.Run(ctx, client, []string{l.LegacyKey("earlier")},
			1, clock.Now().UnixMicro(), 5, time.Minute.Microseconds()).Int64Slice()
		if err != nil || v[0] != 1 {
			t.Fatalf("earlier release, event %d: %v, %v", i, v, err)
		}
		mustTake(t, l, "current", 1)
	}
	for _, at := range []time.Duration{10 * time.Second, 59 * time.Second, time.Minute, 61 * time.Second, 90 * time.Second} {
		clock.Set(start.Add(at))
		earlier, current := mustTake(t, l, "earlier", 1), mustTake(t, l, "current", 1)
		if earlier != current {
			t.Fatalf("at +%v: the key written by the earlier release got %+v, the other %+v", at, earlier, current)
		}
		if at == 10*time.Second && (earlier.Allowed || earlier.RetryAfter != 50*time.Second) {
			t.Fatalf("at +10s: %+v, want refused for 50s (the five events still count)", earlier)
		}
	}
	if n := client.Exists(ctx, l.LegacyKey("earlier")).Val(); n != 0 {
		t.Fatalf("the sorted set outlived the upgrade")
	}
}
