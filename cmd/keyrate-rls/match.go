package main

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match finds the rule a request descriptor falls under in domain, as
// envoyproxy/ratelimit finds it: entry by entry from the domain's top
// level, one level deeper each time, each entry matched by its key and
// value if the configuration gives that value, else by a wildcard value
// (the first in the file that matches), else by its key alone. The rule
// is the last entry's: nil when any entry does not match or the last has
// no rate limit. A match, once made, is never undone for a less specific one.
//
// It also returns the store key of the request's budget under the rule:
// the rule's tier, a zero byte, then the values of the entries matched by
// key alone or by an unshared wildcard (see appendValues); a value the
// configuration spells out adds nothing, the same for every request.
func (rs *ruleSet) match(domain string, entries []*rlv3.RateLimitDescriptor_Entry) (*rule, string) {
	n := rs.domains[domain]
	if n == nil {
		return nil, ""
	}
	var scratch [64]byte
	values := scratch[:0]
	for _, e := range entries {
		key, value := e.GetKey(), e.GetValue()
		next := n.children[entry{key, value}]
		if next == nil {
			for i := range n.wildcards {
				if w := &n.wildcards[i]; w.key == key && matchWildcard(w.parts, value) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = n.children[entry{key, ""}]
		}
		if next == nil {
			return nil, ""
		}
		if next.perValue {
			values = appendValue(values, value)
		}
		n = next
	}
	if n.rule == nil || n.rule.unlimited || n.rule.blocked {
		return n.rule, ""
	}
	return n.rule, storeKey(n.rule.tier, values)
}

// matchWildcard reports whether v matches a pattern split at its '*'s:
// each '*' matches any run of characters, possibly empty.
func matchWildcard(parts []string, v string) bool {
	if len(parts) == 1 {
		return parts[0] == v
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	mid := v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// appendValue appends v to a key's values, its length first, so that no
// two lists of values encode alike ("a","bc" and "ab","c" differ).
func appendValue(b []byte, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// maxInlineValues is the longest encoding of a key's values kept as it is.
// Longer ones are replaced by their SHA-256 digest, so that a client
// sending a long header value cannot make the store hold a long key; two
// budgets share a key only through a SHA-256 collision.
const maxInlineValues = 128

// storeKey returns the key of a budget: the tier's name, a zero byte (the
// tier function cuts there), then 'v' and the values, or 'h' and their
// digest when they are longer than maxInlineValues.
func storeKey(tier string, values []byte) string {
	var b strings.Builder
	if len(values) <= maxInlineValues {
		b.Grow(len(tier) + 2 + len(values))
		b.WriteString(tier)
		b.WriteString("\x00v")
		b.Write(values)
		return b.String()
	}
	sum := sha256.Sum256(values)
	b.Grow(len(tier) + 2 + len(sum))
	b.WriteString(tier)
	b.WriteString("\x00h")
	b.Write(sum[:])
	return b.String()
}

// tierOf returns the tier a store key names: what precedes its first zero
// byte. The limiter calls it on every decision, so it is a byte search.
func tierOf(key string) string {
	if i := strings.IndexByte(key, 0); i >= 0 {
		return key[:i]
	}
	return ""
}
