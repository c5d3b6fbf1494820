package redislimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"sync"
)

// A key's state lives at
//
//	<prefix>{<tag>}<id><suffix>
//
// suffix names the algorithm: ":log" for the sliding log, ":fw" for the
// fixed window, ":gcra" for GCRA.
// id is the key itself when it is at most clientkey.MaxLen (128) bytes,
// else "sha256:" and the base64url SHA-256 digest of the whole key
// (clientkey.Bound, the rule the middleware uses too): any key can be
// limited, distinct keys never share a budget (short of a SHA-256
// collision), and no client can make Redis store a large key. tag is the
// first 4 bytes of SHA-256(id) in hex, or of HMAC-SHA256(secret, id) with
// WithHashTagSecret. Redis Cluster places a key by the text between its
// first '{' and the next '}': made of hex digits, the tag spreads keys over
// the slots whatever bytes they contain, where a tag copied from the key
// would end at its first '}' (1,000 keys "a}..." would all land in the
// slot of "a"). The prefix has no braces (New checks), and everything
// about one key stays in one slot.
//
// Without a secret anyone can compute a key's tag, so a client that
// chooses its keys can choose their slots: about 16,000 tries of SHA-256
// find a key for a given slot of 16,384, three for a given master of
// three. The secret takes that choice away: keys then land where the
// secret puts them, as random keys would.

// tagLen is the length of a tag in hex digits.
const tagLen = 8

// minTagSecret is the shortest secret WithHashTagSecret accepts: 128 bits,
// beyond guessing.
const minTagSecret = 16

// storeKey returns the Redis key of the bounded key id, whose tag is t.
func (l *Limiter) storeKey(id, t string) string { return l.prefix + "{" + t + "}" + id + l.suffix }

// hashTags makes one Limiter's hash tags: from SHA-256 of a bounded key,
// or, with a secret, from HMAC-SHA256 under it.
type hashTags struct {
	macs *sync.Pool // hash.Hash keyed with the secret, reset; nil: no secret
}

func newHashTags(secret []byte) hashTags {
	if secret == nil {
		return hashTags{}
	}
	return hashTags{macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}}
}

// of returns the hash tag of the bounded key id.
func (h hashTags) of(id string) string {
	var sum [sha256.Size]byte
	if h.macs == nil {
		sum = sha256.Sum256([]byte(id))
	} else {
		mac := h.macs.Get().(hash.Hash)
		io.WriteString(mac, id)
		mac.Sum(sum[:0])
		mac.Reset()
		h.macs.Put(mac)
	}
	var t [tagLen]byte
	hex.Encode(t[:], sum[:tagLen/2])
	return string(t[:])
}

// keyRef names a key in errors without revealing it (keys are often API
// keys, and errors end up in logs): by its tag, which also names it in
// Redis (MONITOR, SLOWLOG), enough to correlate.
func keyRef(tag string) string { return "key #" + tag }
