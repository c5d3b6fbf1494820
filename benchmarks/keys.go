package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// Key returns the i-th key of every key set: an API-key-like string of 17
// bytes ("tenant-0000000042"). Keys are formatted once, before any timing.
func Key(i int) string { return fmt.Sprintf("tenant-%010d", i) }

// Keys returns n distinct keys, Key(0) to Key(n-1). The slices are built once
// per size and shared: callers must not modify them.
func Keys(n int) []string {
	keysMu.Lock()
	defer keysMu.Unlock()
	if k, ok := keysBySize[n]; ok {
		return k
	}
	k := make([]string, n)
	for i := range k {
		k[i] = Key(i)
	}
	keysBySize[n] = k
	return k
}

var (
	keysMu     sync.Mutex
	keysBySize = map[int][]string{}
)

// ZipfParams fix the realistic key stream: ZipfKeys distinct keys, drawn with
// exponent ZipfS (a few heavy clients, a long tail), ZipfLen draws long.
const (
	ZipfKeys = 100_000
	ZipfS    = 1.1
	ZipfLen  = 1 << 20
)

// ZipfStream returns the pre-generated Zipf-distributed stream of keys (the
// same every run: the generator is seeded with constants) and the distinct
// keys it draws from.
func ZipfStream() (stream, distinct []string) {
	zipfOnce.Do(func() {
		keys := Keys(ZipfKeys)
		z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), ZipfS, 1, ZipfKeys-1)
		zipfStream = make([]string, ZipfLen)
		seen := make([]bool, ZipfKeys)
		for i := range zipfStream {
			j := z.Uint64()
			zipfStream[i] = keys[j]
			if !seen[j] {
				seen[j] = true
				zipfDistinct = append(zipfDistinct, keys[j])
			}
		}
	})
	return zipfStream, zipfDistinct
}

var (
	zipfOnce     sync.Once
	zipfStream   []string
	zipfDistinct []string
)
