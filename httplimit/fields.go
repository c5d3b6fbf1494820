package httplimit

import "net/http"

// fields holds the header-map slices of the fields one middleware writes
// on one response: one array for all of them, cut into slices of capacity
// 1, so that the slices cost one allocation however many fields there are,
// instead of one per field. Each value is a string of its own.
type fields struct {
	vals []string
}

// newFields returns room for the fields this middleware writes.
func (m *Middleware) newFields() fields {
	n := 0
	if m.headers&DraftHeaders != 0 {
		n += 2
	}
	if m.headers&LegacyHeaders != 0 {
		n += 3
	}
	if m.headers&XHeaders != 0 {
		n += 3
	}
	if m.headers&TokenHeaders != 0 {
		n += 6
	}
	return fields{vals: make([]string, 0, n)}
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
