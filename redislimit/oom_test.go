package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// fillRedis writes values under keys of its own until Redis refuses even
// a small one with OOM, and fails t if it never does: 10 KB values first,
// then 100 bytes (a large request can be refused while small writes still
// fit); then it lowers maxmemory below what is used.
func fillRedis(t *testing.T, client *redis.Client) {
	t.Helper()
	ctx := context.Background()
	i := 0
	for _, size := range []int{10_000, 100} {
		value := strings.Repeat("x", size)
		for full := false; !full; i++ {
			if i == 1_000_000 {
				t.Fatal("a million values fitted under maxmemory")
			}
			err := client.Set(ctx, fmt.Sprintf("filler:%d", i), value, 0).Err()
			if err != nil && !redis.IsOOMError(err) {
				t.Fatal(err)
			}
			full = err != nil
		}
	}
	// Redis frees a little memory on its own after the fill (a client's
	// query buffer shrinks), which would let one more write through: a
	// maxmemory below what is used keeps every write refused.
	if err := client.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestOutOfMemory runs every algorithm on a redis-server at its maxmemory
// under the noeviction policy: an admission, which must write, fails with
// an error wrapping ErrOutOfMemory (and backend.ErrOutOfMemory) that does
// not quote the key, while a key already at its limit is still refused,
// as a refusal's one write, the instant it decided at, is left undone
// when Redis refuses it.
func TestOutOfMemory(t *testing.T) {
	srv := redistest.StartT(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	client := srv.Client(t)
	const secret = "sk_live_4f2a9c"
	var limiters []*redislimit.Limiter
	for _, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		l := newLimiter(t, client, 2, time.Hour, redislimit.WithAlgorithm(alg))
		for range 2 {
			if d := mustTake(t, l, "full-"+secret, 1); !d.Allowed {
				t.Fatalf("%v: %+v before Redis is full", alg, d)
			}
		}
		limiters = append(limiters, l)
	}
	fillRedis(t, client)
	for i, alg := range []keyrate.Algorithm{keyrate.SlidingLog, keyrate.FixedWindow, keyrate.GCRA} {
		l := limiters[i]
		d, err := l.TakeContext(context.Background(), "fresh-"+secret, 1)
		if !errors.Is(err, backend.ErrOutOfMemory) || d.Allowed {
			t.Errorf("%v, a new key on a full Redis: %+v, %v; want an error wrapping ErrOutOfMemory", alg, d, err)
		} else if strings.Contains(err.Error(), "sk_live") {
			t.Errorf("%v: error %q reveals the key", alg, err)
		}
		if d, err := l.TakeContext(context.Background(), "full-"+secret, 1); err != nil || d.Allowed || d.RetryAfter <= 0 {
			t.Errorf("%v, a key at its limit on a full Redis: %+v, %v; want refused", alg, d, err)
		}
	}
}
