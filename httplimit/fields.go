package httplimit

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/keyrate/keyrate"
)

// fields holds what the fields one middleware writes on one response are
// made of, in one allocation (see newFields): the header-map slices, one
// array cut into slices of capacity 1, and the bytes of their values, which
// the values' strings point into.
//
// The bytes are only ever appended to: a string once made from them (value)
// is never written again, which is what makes sharing them safe.
type fields struct {
	vals []string
	buf  []byte
}

// room is how much a response's fields take: values and their bytes. New
// counts it for this middleware's fields; past it, an append only grows the
// slice on the heap.
type room struct{ vals, bytes int }

// The blocks newFields allocates, in the runtime's size classes (64, 80,
// 128, 160, 256, 512 and 1024 bytes), so that none is rounded up.
type (
	block2xs struct {
		vals [2]string
		buf  [32]byte
	}
	block2s struct {
		vals [2]string
		buf  [48]byte
	}
	block2 struct {
		vals [2]string
		buf  [96]byte
	}
	block6s struct {
		vals [6]string
		buf  [64]byte
	}
	block6 struct {
		vals [6]string
		buf  [160]byte
	}
	block8 struct {
		vals [8]string
		buf  [384]byte
	}
	block16 struct {
		vals [16]string
		buf  [768]byte
	}
)

// newFields returns fields with room for r in one allocation, or in two
// (the values, the bytes) when r is larger than every block.
func newFields(r room) fields {
	switch {
	case r.vals <= 2 && r.bytes <= 32:
		b := new(block2xs)
		return fields{vals: b.vals[:0], buf: b.buf[:0]}
	case r.vals <= 2 && r.bytes <= 48:
		b := new(block2s)
		return fields{vals: b.vals[:0], buf: b.buf[:0]}
	case r.vals <= 2 && r.bytes <= 96:
		b := new(block2)
		return fields{vals: b.vals[:0], buf: b.buf[:0]}
	case r.vals <= 6 && r.bytes <= 64:
		b := new(block6s)
		return fields{vals: b.vals[:0], buf: b.buf[:0]}
	case r.vals <= 6 && r.bytes <= 160:
		b := new(block6)
		return fields{vals: b.vals[:0], buf: b.buf[:0]}
	case r.vals <= 8 && r.bytes <= 384:
		b := new(block8)
		return fields{vals: b.vals[:0], buf: b.buf[:0]}
	case r.vals <= 16 && r.bytes <= 768:
		b := new(block16)
		return fields{vals: b.vals[:0], buf: b.buf[:0]}
	}
	return fields{vals: make([]string, 0, r.vals), buf: make([]byte, 0, r.bytes)}
}

// value returns what was appended to f.buf since start, as a string that
// shares its bytes.
func (f *fields) value(start int) string {
	if len(f.buf) == start {
		return ""
	}
	return unsafe.String(&f.buf[start], len(f.buf)-start)
}

// int returns n as a string made in f.buf.
func (f *fields) int(n int64) string {
	start := len(f.buf)
	f.buf = strconv.AppendInt(f.buf, n, 10)
	return f.value(start)
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

// roomFor counts the room of this middleware's fields on one response, and
// on a refusal the default handler answers (Retry-After and the problem
// body's two fields), from its policies: a member of either
// RateLimit field takes its name and at most three parameters, each of at
// most as many digits as the largest limit or window (20 when the policies
// are not known).
func (m *Middleware) roomFor(refusal bool) room {
	name := len(m.route)
	digits := 20
	if len(m.policies) > 0 {
		most := int64(0)
		for _, p := range m.policies {
			name = max(name, len(p.Name))
			most = max(most, int64(p.Limit), int64(p.Window/time.Second)+1)
			if p.Calendar != (keyrate.Calendar{}) {
				most = max(most, 31*24*3600+1) // its period's seconds: a month's at most
			}
		}
		digits = len(strconv.FormatInt(most, 10))
	}
	members := max(len(m.policies), 1)
	if m.tokens {
		members++ // the tokens budget's policies, not known here: one at least
		digits = 20
	}
	member := name + 4 + 3*(3+digits) // quotes, the separator, the parameters
	var r room
	if m.headers&DraftHeaders != 0 {
		r.vals += 2
		r.bytes += members * member // RateLimit
		if m.policy == "" || m.calendar || m.tokens {
			r.bytes += members * (member + len(m.unit) + 6) // RateLimit-Policy, written for each decision
		}
	}
	if m.headers&LegacyHeaders != 0 {
		r.vals += 3
		r.bytes += 3 * digits
	}
	if m.headers&XHeaders != 0 {
		r.vals += 3
		r.bytes += 2*digits + 20 // X-RateLimit-Reset is a Unix time
	}
	if m.headers&TokenHeaders != 0 {
		r.vals += 6
		r.bytes += 6 * 20
	}
	if refusal {
		r.vals += 3           // Retry-After, Content-Type, X-Content-Type-Options
		r.bytes += digits + 1 // Retry-After: at most a window, a second more rounded up
	}
	return r
}
