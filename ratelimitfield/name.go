// Package ratelimitfield writes the values of the RateLimit-Policy and
// RateLimit fields of the IETF draft draft-ietf-httpapi-ratelimit-headers
// (as revision -10 defines them, the parameters keyrate writes for -10 and
// -11) for keyrate's decisions:
//
//	RateLimit-Policy: "second";q=10;w=1, "day";q=1000;w=86400
//	RateLimit: "second";r=9;t=1, "day";r=990;t=51840
//
// Both fields are Structured Field Lists with a member per policy. A
// RateLimit-Policy member gives the policy's quota q, its quota unit qu
// when there is one, and its window w in seconds; a RateLimit member what
// remains r and the seconds t until more quota comes back. httplimit sends
// them as HTTP fields and grpclimit as metadata, both written here, so
// that one decision reads the same over either; a middleware of your own
// can send them too. A Revision chooses RateLimit's parameters: Draft10's,
// the default, or those that the working group's pull request 166
// proposes (Proposal166: a, w and c), for clients that read them.
//
// A member is named by its policy's Name, or, for an unnamed policy (that
// of keyrate.New), by the route passed in: a route name or a gRPC method.
// Without either, it is "default". Every function appends to b and returns
// the extended buffer, as strconv's Append functions do, so that a caller
// can write into a buffer of its own without allocating.
//
// ParseRateLimit reads a RateLimit field back, for a client: what an
// upstream says it has left (httplimit/upstream's transport holds its
// calls to it).
package ratelimitfield

// unnamed names the policy of a caller with no route whose policy has no
// name either.
const unnamed = "default"

// AppendName appends the name that both fields give the policy named policy
// ("" for an unnamed one) under route ("" for none), quoted as a
// structured-field string: policy when it is set, else route, else
// "default". Bytes a structured-field string cannot hold (anything but
// printable ASCII) become '?': names are for people to read, and a
// response must not fail over one. For printable ASCII the result is also
// the name as a JSON string, so that a body can name the policies as the
// fields do.
func AppendName(b []byte, policy, route string) []byte {
	b = append(b, '"')
	switch {
	case policy != "":
		b = appendEscaped(b, policy)
	case route != "":
		b = appendEscaped(b, route)
	default:
		b = append(b, unnamed...)
	}
	return append(b, '"')
}

// appendString appends s as a quoted structured-field string (sf-string).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendEscaped(b, s)
	return append(b, '"')
}

// appendEscaped appends s as the inside of an sf-string.
func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c > 0x7e:
			c = '?'
		case c == '"' || c == '\\':
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return b
}
