package redislimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// crc16 is the CRC-16/XMODEM checksum Redis Cluster places keys with.
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is CLUSTER KEYSLOT: the CRC of the hash tag (the text between
// the first '{' and the next '}', when not empty) or of the whole key.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

func TestKeySlot(t *testing.T) {
	// Values from the Redis Cluster specification and documentation.
	for key, want := range map[string]int{
		"123456789":     0x31C3, // the CRC's check value
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"{}hash_tag":    int(crc16("{}hash_tag") % 16384), // an empty tag counts for nothing
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestHashTagSpreadsSlots checks that keys built to end the hash tag early
// or to carry one of their own still spread over the Cluster's slots: for
// each family of 1,000 adversarial keys, the Redis keys land in at least
// 940 distinct slots of 16,384 (random keys give about 970), with a hash
// tag secret or without.
func TestHashTagSpreadsSlots(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	for _, opts := range [][]redislimit.Option{nil, {redislimit.WithHashTagSecret(tagSecret)}} {
		l, err := redislimit.New(client, 1, time.Hour, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, family := range []string{"a}%d", "}%d", "{}%d", "{a}%d", "x{y}%d", "%d{", "{%d}", strings.Repeat("}", 200) + "%d"} {
			slots := map[int]bool{}
			for i := range 1000 {
				slots[keySlot(l.StoreKey(fmt.Sprintf(family, i)))] = true
			}
			if len(slots) < 940 {
				t.Errorf("secret %v, 1,000 keys %q: %d distinct slots, want at least 940", opts != nil, family, len(slots))
			}
		}
	}
}

// TestLongKeys checks that keys of any length are limited, each on its own
// budget, stored under a bounded Redis key; a key that spells another's
// digest does not share its budget either.
func TestLongKeys(t *testing.T) {
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	l := newLimiter(t, client, 3, time.Hour)
	long := func(size int, c byte) string { return strings.Repeat(string(c), size) }
	digest := func(k string) string {
		sum := sha256.Sum256([]byte(k))
		return "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	keys := []string{
		long(129, 'a'), long(1<<10, 'a'), long(1<<10, 'b'), long(64<<10, 'a'), long(1<<20, 'a'),
		long(1<<10, 'a') + "x", digest(long(1<<10, 'a')), long(128, 'a'),
	}
	for _, k := range keys {
		for i := range 4 {
			d := mustTake(t, l, k, 1)
			if d.Allowed != (i < 3) || d.Remaining != max(2-i, 0) {
				t.Fatalf("key of %d bytes, call %d: %+v; want %d admitted of a limit of 3", len(k), i, d, 3)
			}
		}
		sk := l.StoreKey(k)
		if len(sk) > 200 {
			t.Errorf("key of %d bytes is stored under %d bytes, want at most 200", len(k), len(sk))
		}
		if n, err := client.Exists(ctx, sk).Result(); err != nil || n != 1 {
			t.Errorf("key of %d bytes: its Redis key does not exist (%d, %v)", len(k), n, err)
		}
	}
}

// TestErrorsHideKey drives every error path of Take with a key that looks
// like a credential: no error text may contain it, or any part of it.
func TestErrorsHideKey(t *testing.T) {
	const secret = "sk_live_7f3c9a1e5b2d4c6f8a0e"
	srv := redistest.Shared(t)
	check := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if msg := err.Error(); strings.Contains(msg, secret) || strings.Contains(msg, "sk_live") {
			t.Errorf("%s: error %q reveals the key", name, msg)
		}
	}
	ctx := context.Background()

	l := newLimiter(t, srv.Client(t), 3, time.Hour)
	// A value of the wrong type under the key's name: Redis refuses the script.
	if err := srv.Client(t).HSet(ctx, l.StoreKey(secret), "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.TakeContext(ctx, secret, 1)
	check("wrong type", err)
	if !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("wrong type: %v, want Redis's WRONGTYPE error", err)
	}
	// A string that is not a log: the script refuses it.
	if err := srv.Client(t).Set(ctx, l.StoreKey(secret), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = l.TakeContext(ctx, secret, 1)
	check("not a log", err)
	if !strings.Contains(err.Error(), "not a keyrate log") {
		t.Errorf("not a log: %v, want the script's error", err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.TakeContext(cancelled, secret+"2", 1)
	check("cancelled context", err)

	// A reply of the wrong shape, as from a server running another script.
	bad := srv.Client(t)
	bad.AddHook(replyHook{})
	lb := newLimiter(t, bad, 3, time.Hour)
	_, err = lb.TakeContext(ctx, secret, 1)
	check("malformed reply", err)

	for _, ctxTimeouts := range []bool{true, false} {
		hole := redis.NewClient(&redis.Options{Addr: blackhole(t), ContextTimeoutEnabled: ctxTimeouts})
		t.Cleanup(func() { hole.Close() })
		lh, err := redislimit.New(hole, 3, time.Hour, redislimit.WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		_, err = lh.TakeContext(ctx, secret, 1)
		check(fmt.Sprintf("budget (ContextTimeoutEnabled %v)", ctxTimeouts), err)
		dl, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = lh.TakeContext(dl, secret, 1)
		cancel()
		check(fmt.Sprintf("caller deadline (ContextTimeoutEnabled %v)", ctxTimeouts), err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	refused := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { refused.Close() })
	lr, err := redislimit.New(refused, 3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lr.TakeContext(ctx, secret, 1)
	check("connection refused", err)

	_, err = l.TakeContext(ctx, "", 1)
	check("empty key", err)
	if !errors.Is(err, keyrate.ErrInvalidKey) {
		t.Errorf("empty key: %v, want keyrate.ErrInvalidKey", err)
	}
}

// replyHook replaces every script's reply with one number.
type replyHook struct{}

func (replyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok && err == nil && strings.HasPrefix(cmd.Name(), "eval") {
			c.SetVal([]any{int64(1)})
		}
		return err
	}
}

// tagSecret is a hash tag secret for the tests: 32 bytes, as from
// crypto/rand.
var tagSecret = []byte("0123456789abcdef0123456789abcdef")

// aimedKeys returns n keys whose Redis keys, under the unkeyed hash tag
// (which anyone can compute: it is SHA-256 of the key), all land in a slot
// that aim accepts, found by trying keys in turn as an attacker would.
func aimedKeys(t *testing.T, n int, aim func(slot int) bool) []string {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	unkeyed, err := redislimit.New(client, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("aimed-%d", i)
		if aim(keySlot(unkeyed.StoreKey(k))) {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestHashTagSecret: with a secret, a key's hash tag is another than the
// unkeyed one, the same for every limiter given the same secret (replicas
// share budgets), and another for another secret. Keys aimed at a few
// slots with the unkeyed tag all land there without the secret, and
// spread over the slots with it.
func TestHashTagSecret(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	mk := func(opts ...redislimit.Option) *redislimit.Limiter {
		t.Helper()
		l, err := redislimit.New(client, 1, time.Hour, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	unkeyed := mk()
	keyed, replica := mk(redislimit.WithHashTagSecret(tagSecret)), mk(redislimit.WithHashTagSecret(tagSecret))
	other := mk(redislimit.WithHashTagSecret([]byte("another secret of 32 bytes......")))
	for i := range 100 {
		k := fmt.Sprintf("user-%d", i)
		switch sk := keyed.StoreKey(k); {
		case sk == unkeyed.StoreKey(k):
			t.Fatalf("key %d: the keyed Redis key %q is the unkeyed one", i, sk)
		case sk != replica.StoreKey(k):
			t.Fatalf("key %d: %q, and %q under the same secret", i, sk, replica.StoreKey(k))
		case sk == other.StoreKey(k):
			t.Fatalf("key %d: %q under two secrets", i, sk)
		case !strings.HasSuffix(sk, "}"+k+":log"):
			t.Fatalf("key %d: %q does not end in the key", i, sk)
		}
	}

	// 100 keys aimed at 16 slots of 16,384: about 1,000 tries each.
	aimed := func(slot int) bool { return slot < 16 }
	keys := aimedKeys(t, 100, aimed)
	slots, hits := map[int]bool{}, 0
	for _, k := range keys {
		s := keySlot(keyed.StoreKey(k))
		slots[s] = true
		if aimed(s) {
			hits++
		}
		if !aimed(keySlot(unkeyed.StoreKey(k))) {
			t.Fatalf("key %q was not aimed", k)
		}
	}
	// Spread at random, 100 keys would take about 99.7 slots and land in
	// the 16 about 0.1 times.
	if len(slots) < 95 || hits > 2 {
		t.Errorf("100 keys aimed at 16 slots, with a secret: %d distinct slots, %d in the aimed ones; want at least 95 and at most 2", len(slots), hits)
	}
}

// TestHashTagSecretConfig: a secret shorter than 16 bytes, or none, is an
// error; the secret is copied, so changing the caller's slice afterwards
// changes nothing.
func TestHashTagSecretConfig(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	for _, s := range [][]byte{nil, {}, []byte("fifteen bytes..")} {
		if _, err := redislimit.New(client, 1, time.Hour, redislimit.WithHashTagSecret(s)); !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("WithHashTagSecret of %d bytes: %v, want keyrate.ErrConfig", len(s), err)
		}
	}
	secret := append([]byte(nil), tagSecret...)
	l, err := redislimit.New(client, 1, time.Hour, redislimit.WithHashTagSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	before := l.StoreKey("k")
	secret[0] ^= 0xff
	if after := l.StoreKey("k"); after != before {
		t.Errorf("changing the caller's secret moved the key from %q to %q", before, after)
	}
}
