package redislimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// denyBenchKeys is how many refused keys the deny cache holds in its
// benchmarks, as WithDenyCache(10_000) bounds it.
const denyBenchKeys = 10_000

// fullDenyCache returns a deny cache holding a refusal for each of keys,
// sent at instant 0 and standing for 4s, under tier t.
func fullDenyCache(b *testing.B, keys []string) (*denyCache, *tier) {
	t := mustTier(b, keyrate.Policy{Limit: 3, Window: 20 * time.Second})
	c := newDenyCache(len(keys), time.Minute, true)
	for _, k := range keys {
		c.store(k, t, 1, 0, denyBenchRefusal(t))
	}
	if len(c.entries) != len(keys) {
		b.Fatalf("the cache holds %d entries, want %d", len(c.entries), len(keys))
	}
	return c, t
}

func denyBenchRefusal(t *tier) keyrate.Decision {
	return backend.Combine(keyrate.PolicyDecision{Policy: t.policies[0], RetryAfter: 10 * time.Second, RefillAfter: 4 * time.Second, ResetAfter: 12 * time.Second})
}

func denyBenchKeyNames() []string {
	keys := make([]string, denyBenchKeys)
	for i := range keys {
		keys[i] = "api\x00client-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkDenyCache measures the deny cache's two steps on the decision
// path, with 10,000 refused keys held: Refuse, a lookup that finds a
// refusal still standing and counts its durations down (what a refused
// client's retry costs instead of a round trip), and Store, remembering
// Redis's refusal of a key already held, with its new expiry in the heap.
// Its counterparts for jellydator/ttlcache and hashicorp/golang-lru's
// expirable LRU are dev/librarybench's BenchmarkExpiringCache.
func BenchmarkDenyCache(b *testing.B) {
	keys := denyBenchKeyNames()
	b.Run("Refuse", func(b *testing.B) {
		c, t := fullDenyCache(b, keys)
		now := int64(time.Second)
		i := 0
		for b.Loop() {
			if _, ok := c.refuse(keys[i%len(keys)], t, 1, now); !ok {
				b.Fatal("a refusal that stands was not found")
			}
			i++
		}
	})
	b.Run("Store", func(b *testing.B) {
		c, t := fullDenyCache(b, keys)
		d := denyBenchRefusal(t)
		i := 0
		for b.Loop() {
			c.store(keys[i%len(keys)], t, 1, int64(i), d)
			i++
		}
		if len(c.entries) != len(keys) {
			b.Fatalf("the cache holds %d entries, want %d", len(c.entries), len(keys))
		}
	})
}
