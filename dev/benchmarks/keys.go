package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// Key returns the i-th key of every key set: an API-key-like string of 17
// bytes ("tenant-0000000042"). Keys are formatted once, before any timing.
func Key(i int) string { return fmt.Sprintf("tenant-%010d", i) }

// Keys returns n distinct keys, Key(0) to Key(n-1). Callers share the
// slices and must not modify them.
func Keys(n int) []string { return KeyRange(0, n) }

// KeyRange returns the keys Key(from) to Key(to-1). Every key is formatted
// once, the first time any caller asks for it, and kept for the life of the
// process (the admit workloads ask for fresh keys as they go). Callers share
// the slices and must not modify them.
func KeyRange(from, to int) []string {
	keysMu.Lock()
	defer keysMu.Unlock()
	for len(allKeys) < to {
		allKeys = append(allKeys, Key(len(allKeys)))
	}
	// The capacity ends at to, so no caller's append can reach keys that
	// another caller holds.
	return allKeys[from:to:to]
}

var (
	keysMu  sync.Mutex
	allKeys []string
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
	zipfOnce.Do(makeZipf)
	return zipfStream, zipfDistinct
}

// zipfClients returns the same stream as client numbers: stream[i] is
// Key(clients[i]).
func zipfClients() []int32 {
	zipfOnce.Do(makeZipf)
	return zipfIndex
}

func makeZipf() {
	keys := Keys(ZipfKeys)
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), ZipfS, 1, ZipfKeys-1)
	zipfIndex = make([]int32, ZipfLen)
	zipfStream = make([]string, ZipfLen)
	seen := make([]bool, ZipfKeys)
	for i := range zipfStream {
		j := z.Uint64()
		zipfIndex[i] = int32(j)
		zipfStream[i] = keys[j]
		if !seen[j] {
			seen[j] = true
			zipfDistinct = append(zipfDistinct, keys[j])
		}
	}
}

var (
	zipfOnce     sync.Once
	zipfIndex    []int32
	zipfStream   []string
	zipfDistinct []string
)
