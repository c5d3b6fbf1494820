package main

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/keyrate/keyrate/clientkey"
)

// keyPrefix is what httplimit.HeaderKey puts before an API key in the
// identities it returns: the header's name in lower case and "=".
var keyPrefix = strings.ToLower(keyHeader) + "="

// shownIdentity is how the demo shows a client in its log and on its live
// page, which every browser that opens it sees: an API key never in the
// clear, but as a fingerprint, the first 8 hex digits of its SHA-256 after
// the header name ("x-api-key=2bd806c9" for alice). Enough to tell a few
// clients apart and to match them against a key one holds; nothing to
// replay. An IP address, and the "sha256:" digest that stands for an
// identity too long to keep, are shown as they are.
func shownIdentity(identity string) string {
	if key, ok := strings.CutPrefix(identity, keyPrefix); ok {
		sum := sha256.Sum256([]byte(key))
		return keyPrefix + hex.EncodeToString(sum[:4])
	}
	return identity
}

// shownKey is shownIdentity for the requests that send value as their API
// key: the identity httplimit.HeaderKey gives them, bounded as the
// middleware bounds it, then shown.
func shownKey(value string) string {
	return shownIdentity(clientkey.Bound(keyPrefix + value))
}
