package httplimit

import (
	"net/http"
	"strconv"

	"github.com/keyrate/keyrate"
)

// DefaultLimitedHandler answers a refused request with an RFC 9457
// application/problem+json body:
//
//   - 429 Too Many Requests when waiting helps: the key's budget is spent, or
//     the backend tracks too many keys (Decision.Overflow). Retry-After is
//     already set, in whole seconds rounded up, never 0.
//   - 413 Content Too Large when it cannot: the request's cost exceeds the
//     limit (a refusal with RetryAfter 0), so no wait would let it through.
//     No Retry-After is sent; retrying the same request is pointless.
func DefaultLimitedHandler(w http.ResponseWriter, r *http.Request, d keyrate.Decision) {
	if d.RetryAfter <= 0 && !d.Overflow {
		writeProblem(w, http.StatusRequestEntityTooLarge,
			"This request costs more than the limit of "+strconv.Itoa(d.Limit)+" allows; it can never be admitted.")
		return
	}
	wait := strconv.FormatInt(ceilSeconds(d.RetryAfter), 10)
	detail := "Rate limit exceeded; retry in " + wait + " seconds."
	if d.Overflow {
		detail = "Too many clients are being tracked; retry in " + wait + " seconds."
	}
	writeProblem(w, http.StatusTooManyRequests, detail)
}

// writeProblem writes an RFC 9457 problem body of type about:blank, whose
// title is the status's reason phrase. detail must need no JSON escaping.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	title := http.StatusText(status)
	body := make([]byte, 0, 96+len(title)+len(detail))
	body = append(body, `{"type":"about:blank","title":"`...)
	body = append(body, title...)
	body = append(body, `","status":`...)
	body = strconv.AppendInt(body, int64(status), 10)
	body = append(body, `,"detail":"`...)
	body = append(body, detail...)
	body = append(body, "\"}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}
