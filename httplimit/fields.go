package httplimit

import (
	"net/http"
	"unsafe"

	"github.com/keyrate/keyrate"
)

// fields holds the values of the fields one middleware writes on one
// response, and the one-element slices the header map keeps them in, so
// that a response costs one allocation however many fields it gets,
// instead of two per field (its value, its slice).
type fields struct {
	vals []string // slices of the header map are cut from here
	buf  []byte   // field values, appended one after another
}

// Room for one policy's members, past the route's and the policy's names:
// the quotes and separators, and numbers of up to 10 digits (a limit fits
// in 10; a t of 10 is over 300 years).
const (
	usageBytes  = len(`"",:;r=;t=`) + 2*10
	policyBytes = len(`"",:;q=;qu="";w=`) + 2*10
	legacyBytes = 6 * 20 // six more numbers, LegacyHeaders and XHeaders
)

// fieldBlock and wideBlock are the memory of fields for the default
// DraftHeaders in one allocation: fieldBlock for one policy with a route
// name of common length, wideBlock for a few.
type (
	fieldBlock struct {
		vals [2]string
		buf  [64]byte
	}
	wideBlock struct {
		vals [2]string
		buf  [224]byte
	}
)

// newFields returns room for this middleware's fields about parts, with
// their RateLimit-Policy members when policy is set: one block when it
// fits, else one array and one buffer of the sizes the header set needs.
// Room that runs out only costs an allocation more.
func (m *Middleware) newFields(parts []keyrate.PolicyDecision, policy bool) fields {
	n := 0
	for i := range parts {
		names := len(m.route) + len(parts[i].Name)
		n += names + usageBytes
		if policy {
			n += names + len(m.unit) + policyBytes
		}
	}
	if m.headers == DraftHeaders {
		switch {
		case n <= len(fieldBlock{}.buf):
			b := new(fieldBlock)
			return fields{vals: b.vals[:0], buf: b.buf[:0]}
		case n <= len(wideBlock{}.buf):
			b := new(wideBlock)
			return fields{vals: b.vals[:0], buf: b.buf[:0]}
		}
	}
	return fields{vals: make([]string, 0, 8), buf: make([]byte, 0, n+legacyBytes)}
}

// value returns b, the field buffer with one more value appended, as that
// value's string, sharing the buffer's memory. The bytes of a value are
// never written again: later values are appended after them, and a buffer
// that grows moves to new memory, leaving the old to the strings that use
// it.
func (f *fields) value(b []byte) string {
	start := len(f.buf)
	f.buf = b
	if len(b) == start {
		return ""
	}
	return unsafe.String(&b[start], len(b)-start)
}

// line returns v in a header-map slice of its own, of capacity 1, so that
// a later append to it copies instead of writing into f.
func (f *fields) line(v string) []string {
	n := len(f.vals)
	f.vals = append(f.vals, v)
	return f.vals[n : n+1 : n+1]
}

// add adds v to the list field k, beside any members already there.
func (f *fields) add(h http.Header, k, v string) {
	if old := h[k]; len(old) > 0 {
		h[k] = append(old, v)
		return
	}
	h[k] = f.line(v)
}

// set makes v the value of the single-valued field k.
func (f *fields) set(h http.Header, k, v string) { h[k] = f.line(v) }
