// Package clientkey turns what identifies a client into a key fit for any
// store: bounded in length whatever the client sent (Bound), and an
// address grouped so that one client cannot mint many keys (Addr).
// httplimit, grpclimit and the Redis backend derive their keys with it, so
// that one client gets the same key from each.
package clientkey

import (
	"crypto/sha256"
	"encoding/base64"
	"net/netip"
	"strings"
)

// MaxLen is the longest identity Bound keeps as it is. Longer ones are
// replaced by their SHA-256 digest: every store then holds keys of at most
// MaxLen bytes, and a client cannot make one hold a large key.
const MaxLen = 128

// hashed starts every digest Bound returns. An identity that happens to
// start with it is hashed too, so a client can never choose a short
// identity equal to the digest of another's long one.
const hashed = "sha256:"

// Bound returns id when it is at most MaxLen bytes, else "sha256:" and the
// unpadded base64url SHA-256 digest of the whole of id (50 bytes). An id
// that starts with "sha256:" is hashed whatever its length. Distinct
// identities map to distinct keys, save for a SHA-256 collision: two
// clients never share a budget by accident, as they would under a 64-bit
// hash. It allocates only for identities it hashes.
func Bound(id string) string {
	if len(id) <= MaxLen && !strings.HasPrefix(id, hashed) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	var buf [len(hashed) + 43]byte
	copy(buf[:], hashed)
	base64.RawURLEncoding.Encode(buf[len(hashed):], sum[:])
	return string(buf[:])
}

// Addr returns the key of a client at address a: a alone (IPv4-mapped IPv6
// unmapped, zone dropped) when its group is one address, else its group's
// prefix as text ("2001:db8:1:2::/64"). v4bits and v6bits are the group
// sizes, the leading bits one client owns: 32 and 64 in httplimit and
// grpclimit, since one subscriber is usually given a whole IPv6 /64 and
// could otherwise rotate through it past its limit. A size is taken
// within 0 and the address's length, and an invalid a has the key "".
func Addr(a netip.Addr, v4bits, v6bits int) string {
	var buf [64]byte
	return string(AppendAddr(buf[:0], a, v4bits, v6bits))
}

// AppendAddr appends Addr's key for a to dst, for a caller that builds a
// longer key around it without a string of its own.
func AppendAddr(dst []byte, a netip.Addr, v4bits, v6bits int) []byte {
	if !a.IsValid() {
		return dst
	}
	a = a.Unmap().WithZone("")
	bits := v6bits
	if a.Is4() {
		bits = v4bits
	}
	bits = min(max(bits, 0), a.BitLen())
	if bits == a.BitLen() {
		return a.AppendTo(dst)
	}
	p, _ := a.Prefix(bits) // bits is within the address's length
	return p.AppendTo(dst)
}
