package redislimit

import (
	"crypto/sha256"
	"encoding/hex"
)

// A key's state lives at
//
//	<prefix>{<tag>}<id><suffix>
//
// suffix names the algorithm: ":log" for the sliding log (":sl" in earlier
// releases, whose sorted sets the script merges in, see legacy.go), ":fw"
// for the fixed window.
// id is the key itself when it is at most clientkey.MaxLen (128) bytes,
// else "sha256:" and the base64url SHA-256 digest of the whole key
// (clientkey.Bound, the rule the middleware uses too): any key can be
// limited, distinct keys never share a budget (short of a SHA-256
// collision), and no client can make Redis store a large key. tag is the
// first 4 bytes of SHA-256(id) in hex. Redis Cluster places a key by the
// text between its first '{' and the next '}': made of hex digits, the tag
// spreads keys over the slots whatever bytes they contain, where a tag
// copied from the key would end at its first '}' (1,000 keys "a}..." would
// all land in the slot of "a"). The prefix has no braces (New checks), and
// everything about one key stays in one slot.

// tagLen is the length of a tag in hex digits.
const tagLen = 8

// storeKey returns the Redis key of the bounded key id, whose tag is t.
func (l *Limiter) storeKey(id, t string) string { return l.prefix + "{" + t + "}" + id + l.suffix }

// legacyKey returns where earlier releases kept the sliding log of the
// bounded key id, whose tag is t.
func (l *Limiter) legacyKey(id, t string) string { return l.prefix + "{" + t + "}" + id + l.legacy }

// tag returns the hash tag of a bounded key.
func tag(id string) string {
	var t [tagLen]byte
	sum := sha256.Sum256([]byte(id))
	hex.Encode(t[:], sum[:tagLen/2])
	return string(t[:])
}

// keyRef names a key in errors without revealing it (keys are often API
// keys, and errors end up in logs): by its tag, which also names it in
// Redis (MONITOR, SLOWLOG), enough to correlate.
func keyRef(tag string) string { return "key #" + tag }
