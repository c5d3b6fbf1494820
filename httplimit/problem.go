package httplimit

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
	"github.com/keyrate/keyrate/ratelimitfield"
)

// The draft's problem types (draft-ietf-httpapi-ratelimit-headers-10,
// section 5), with the titles it registers for them: quota-exceeded for a
// request over one or more quota policies (429), temporary-reduced-capacity
// for one the server cannot serve for a temporary lack of capacity (503).
const (
	quotaExceeded      = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle = "Quota Exceeded"
	reducedCapacity    = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// DefaultLimitedHandler answers a refused request with an RFC 9457
// application/problem+json body: 429 Too Many Requests with the draft's
// problem type, "https://iana.org/assignments/http-problem-types#quota-exceeded",
// and a "violated-policies" member naming every policy that refused it (its
// Retry-After already set); 429 of type about:blank, naming none, when the
// backend tracks too many keys to take this one (Decision.Overflow); and
// 413 Content Too Large, with no Retry-After, when the request's weight
// exceeds a policy's limit, so that no wait would let it through. See the
// README, "What a client sees".
func DefaultLimitedHandler(w http.ResponseWriter, r *http.Request, e middleware.Event) {
	f := fields{vals: make([]string, 0, 2)}
	writeLimited(w, &e, &f)
}

// writeLimited is DefaultLimitedHandler with f's room for the body's two
// fields, which the middleware's own refusals share with their RateLimit
// fields.
func writeLimited(w http.ResponseWriter, e *middleware.Event, f *fields) {
	d := &e.Decision
	if d.RetryAfter <= 0 && !d.Overflow {
		writeProblem(w, http.StatusRequestEntityTooLarge,
			"This request costs more than the limit of "+strconv.Itoa(d.Limit)+" allows; it can never be admitted.")
		return
	}
	wait := ratelimitfield.Seconds(d.RetryAfter)
	if d.Overflow {
		writeProblem(w, http.StatusTooManyRequests, "Too many clients are being tracked; retry in "+strconv.FormatInt(wait, 10)+" seconds.")
		return
	}
	// The refusal a client over its budget gets again and again, so it is
	// written in a buffer of bodies: the constant start, the wait, the
	// names.
	p := bodies.Get().(*[]byte)
	body := append((*p)[:0], quotaExceededStart...)
	body = strconv.AppendInt(body, wait, 10)
	body = append(body, quotaExceededWait...)
	if e.Budgets != nil {
		body = appendViolatedBudgets(body, e.Route, e.Budgets)
	} else {
		body = appendViolated(body, e.Route, d)
	}
	body = append(body, quotaExceededEnd...)
	f.writeBody(w, http.StatusTooManyRequests, body)
	if cap(body) <= maxPooledBody {
		*p = body
		bodies.Put(p)
	}
}

// bodies holds the buffers quota-exceeded bodies are written in. A Write
// must not keep the bytes it is given (io.Writer), so a buffer is put back
// once written, as encoding/json's Encoder puts back its own; one grown
// past maxPooledBody (a refusal naming many long policies) is left to the
// collector.
var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledBody = 4 << 10

// A quota-exceeded body: quotaExceededStart, the wait in its detail,
// quotaExceededWait, the names of the violated policies, quotaExceededEnd.
const (
	quotaExceededStart = `{"type":"` + quotaExceeded + `","title":"` + quotaExceededTitle +
		`","status":429,"detail":"Rate limit exceeded; retry in `
	quotaExceededWait = ` seconds.","violated-policies":[`
	quotaExceededEnd  = "]}\n"
)

// appendViolated appends the names of the policies that refused d, quoted
// and separated by commas: every refusing part, or the binding policy for
// a Decision whose parts say none refused. The names are quoted as
// structured-field strings: printable ASCII with " and \ escaped, which is
// also how JSON quotes them.
func appendViolated(b []byte, route string, d *keyrate.Decision) []byte {
	start := len(b)
	for _, p := range d.Policies() {
		if p.Allowed {
			continue
		}
		if len(b) > start {
			b = append(b, ',')
		}
		b = ratelimitfield.AppendName(b, p.Name, route)
	}
	if len(b) == start {
		b = ratelimitfield.AppendName(b, d.Policy, route)
	}
	return b
}

// appendViolatedBudgets is appendViolated for a token budget's refusal:
// the policies of each budget that refused it.
func appendViolatedBudgets(b []byte, route string, ds []keyrate.Decision) []byte {
	for i := range ds {
		if ds[i].Allowed {
			continue // it had room
		}
		if b[len(b)-1] != '[' {
			b = append(b, ',')
		}
		b = appendViolated(b, route, &ds[i])
	}
	return b
}

// unavailableBody answers a request refused under FailClosed because the
// store is unavailable: the server's capacity to decide is what is reduced,
// for a while. It has no violated-policies member, which names the
// policies whose quota was exceeded: no policy was evaluated, so none was.
const unavailableBody = `{"type":"` + reducedCapacity + `","title":"Temporary Reduced Capacity","status":503,` +
	`"detail":"The rate limiter is unavailable; try again shortly."}` + "\n"

// writeUnavailable writes the 503 of unavailableBody.
func writeUnavailable(w http.ResponseWriter) {
	writeBody(w, http.StatusServiceUnavailable, []byte(unavailableBody))
}

// writeProblem writes an RFC 9457 problem body of type about:blank, whose
// title is the status's reason phrase. detail must need no JSON escaping.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	body := make([]byte, 0, 96+len(detail))
	body = append(body, `{"type":"about:blank","title":`...)
	body = strconv.AppendQuote(body, http.StatusText(status))
	body = append(body, `,"status":`...)
	body = strconv.AppendInt(body, int64(status), 10)
	body = append(body, `,"detail":`...)
	body = strconv.AppendQuote(body, detail)
	body = append(body, "}\n"...)
	writeBody(w, status, body)
}

// writeBody sends a problem body. Its two fields' values share one
// allocation; net/http adds Content-Length, the body being written whole
// in one call.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	f := fields{vals: make([]string, 0, 2)}
	f.writeBody(w, status, body)
}

// writeBody is writeBody with f's room for the two fields.
func (f *fields) writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	f.set(h, hContentType, "application/problem+json")
	f.set(h, hNoSniff, "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}

var (
	hContentType = http.CanonicalHeaderKey("Content-Type")
	hNoSniff     = http.CanonicalHeaderKey("X-Content-Type-Options")
)
