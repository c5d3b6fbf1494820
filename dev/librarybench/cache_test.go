package librarybench

import (
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/jellydator/ttlcache/v3"

	"github.com/keyrate/keyrate"
)

// cacheKeys is how many refused keys each cache holds, as in redislimit's
// BenchmarkDenyCache.
const cacheKeys = 10_000

// refusal is what a deny cache remembers of one refusal: the weight, the
// instant the call was sent, Redis's answer and how long it stands.
type refusal struct {
	n    int
	sent int64
	d    keyrate.Decision
	hold time.Duration
}

func cacheKeyNames() []string {
	keys := make([]string, cacheKeys)
	for i := range keys {
		keys[i] = "api\x00client-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkExpiringCache measures the two libraries a deny cache could be
// built on, holding 10,000 refused keys: Get, a lookup that finds the
// entry, and Set (Add), replacing a held key's entry with a new one and
// its expiry. ttlcache takes an expiry per entry, as the deny cache needs
// (each refusal stands as long as its own decision says), with touch on hit
// turned off, so that a lookup does not extend it; the expirable LRU has
// one expiry for the whole cache, fixed at its creation. Neither reads an
// injected clock, and neither counts the durations down on a lookup, which
// redislimit's Refuse does: its numbers include that work.
func BenchmarkExpiringCache(b *testing.B) {
	keys := cacheKeyNames()
	v := refusal{n: 1, hold: 4 * time.Second}
	b.Run("ttlcache/Get", func(b *testing.B) {
		c := ttlcache.New(ttlcache.WithCapacity[string, refusal](cacheKeys), ttlcache.WithDisableTouchOnHit[string, refusal]())
		for _, k := range keys {
			c.Set(k, v, time.Minute)
		}
		i := 0
		for b.Loop() {
			if c.Get(keys[i%len(keys)]) == nil {
				b.Fatal("a held entry was not found")
			}
			i++
		}
	})
	b.Run("ttlcache/Set", func(b *testing.B) {
		c := ttlcache.New(ttlcache.WithCapacity[string, refusal](cacheKeys), ttlcache.WithDisableTouchOnHit[string, refusal]())
		for _, k := range keys {
			c.Set(k, v, time.Minute)
		}
		i := 0
		for b.Loop() {
			c.Set(keys[i%len(keys)], v, time.Minute)
			i++
		}
		if c.Len() != cacheKeys {
			b.Fatalf("holds %d, want %d", c.Len(), cacheKeys)
		}
	})
	b.Run("expirable/Get", func(b *testing.B) {
		c := expirable.NewLRU[string, refusal](cacheKeys, nil, time.Minute)
		for _, k := range keys {
			c.Add(k, v)
		}
		i := 0
		for b.Loop() {
			if _, ok := c.Get(keys[i%len(keys)]); !ok {
				b.Fatal("a held entry was not found")
			}
			i++
		}
	})
	b.Run("expirable/Add", func(b *testing.B) {
		c := expirable.NewLRU[string, refusal](cacheKeys, nil, time.Minute)
		for _, k := range keys {
			c.Add(k, v)
		}
		i := 0
		for b.Loop() {
			c.Add(keys[i%len(keys)], v)
			i++
		}
		if c.Len() != cacheKeys {
			b.Fatalf("holds %d, want %d", c.Len(), cacheKeys)
		}
	})
}
