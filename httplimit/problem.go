package httplimit

import (
	"net/http"
	"strconv"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/ratelimitfield"
)

// quotaExceeded is the draft's problem type for a request over one or more
// quota policies (draft-ietf-httpapi-ratelimit-headers, section 5.1),
// with the title it registers for it.
const (
	quotaExceeded      = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle = "Quota Exceeded"
)

// DefaultLimitedHandler answers a refused request with an RFC 9457
// application/problem+json body:
//
//   - 429 Too Many Requests when the key's budget is spent, with the
//     draft's problem type for it,
//     "https://iana.org/assignments/http-problem-types#quota-exceeded", and
//     its "violated-policies" member naming every policy that refused the
//     request, as the RateLimit fields name them (see DraftHeaders).
//     Retry-After is already set, in whole seconds rounded up, never 0:
//     when the request fits every policy.
//   - 429 Too Many Requests of type about:blank when the backend tracks too
//     many keys to take this one (Decision.Overflow): no policy of the
//     client's was violated, so none is named. Retry-After is one window.
//   - 413 Content Too Large of type about:blank when the request's cost
//     exceeds a policy's limit (a refusal with RetryAfter 0), so no wait
//     would let it through. No Retry-After is sent; retrying the same request is
//     pointless.
func DefaultLimitedHandler(w http.ResponseWriter, r *http.Request, e Event) {
	d := e.Decision
	if d.RetryAfter <= 0 && !d.Overflow {
		writeProblem(w, http.StatusRequestEntityTooLarge,
			"This request costs more than the limit of "+strconv.Itoa(d.Limit)+" allows; it can never be admitted.")
		return
	}
	wait := strconv.FormatInt(ratelimitfield.CeilSeconds(d.RetryAfter), 10)
	if d.Overflow {
		writeProblem(w, http.StatusTooManyRequests, "Too many clients are being tracked; retry in "+wait+" seconds.")
		return
	}
	p := problem{
		typ:      quotaExceeded,
		title:    quotaExceededTitle,
		status:   http.StatusTooManyRequests,
		detail:   "Rate limit exceeded; retry in " + wait + " seconds.",
		violated: appendViolated(nil, e.Route, &d),
	}
	p.write(w)
}

// appendViolated appends the names of the policies that refused d, quoted
// and separated by commas: every refusing part, or the binding policy for
// a Decision whose parts say none refused.
func appendViolated(b []byte, route string, d *keyrate.Decision) []byte {
	var one [1]keyrate.PolicyDecision
	for _, p := range ratelimitfield.Parts(d, 0, &one) {
		if p.Allowed {
			continue
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = ratelimitfield.AppendName(b, route, p.Name)
	}
	if len(b) == 0 {
		b = ratelimitfield.AppendName(b, route, d.Policy)
	}
	return b
}

// problem is an RFC 9457 problem body.
type problem struct {
	typ, title string // "" for about:blank, titled by the status
	status     int
	detail     string // must need no JSON escaping
	violated   []byte // quoted names, comma-separated (see appendViolated)
}

// writeProblem writes a problem body of type about:blank, whose title is
// the status's reason phrase.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	problem{status: status, detail: detail}.write(w)
}

func (p problem) write(w http.ResponseWriter) {
	typ, title := p.typ, p.title
	if typ == "" {
		typ, title = "about:blank", http.StatusText(p.status)
	}
	body := make([]byte, 0, 160+len(p.detail))
	body = append(body, `{"type":`...)
	body = strconv.AppendQuote(body, typ)
	body = append(body, `,"title":`...)
	body = strconv.AppendQuote(body, title)
	body = append(body, `,"status":`...)
	body = strconv.AppendInt(body, int64(p.status), 10)
	body = append(body, `,"detail":`...)
	body = strconv.AppendQuote(body, p.detail)
	if len(p.violated) > 0 {
		// The names are quoted as structured-field strings: printable
		// ASCII with " and \ escaped, which is also how JSON quotes them.
		body = append(body, `,"violated-policies":[`...)
		body = append(body, p.violated...)
		body = append(body, ']')
	}
	body = append(body, "}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.status)
	w.Write(body)
}
