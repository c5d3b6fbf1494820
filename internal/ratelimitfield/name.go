// Package ratelimitfield writes the values of the RateLimit-Policy and
// RateLimit fields of the IETF draft draft-ietf-httpapi-ratelimit-headers
// (-10, -11) for keyrate's decisions. httplimit sends them as HTTP fields
// and grpclimit as metadata; both write them here, so that one decision
// reads the same over either transport.
package ratelimitfield

// Default names the policy of a middleware with no route whose policy has
// no name either.
const Default = "default"

// Printable reports whether s is printable ASCII, all that a
// structured-field string can hold.
func Printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// AppendString appends s as a quoted structured-field string (sf-string).
// Bytes an sf-string cannot hold become '?': names are for people to read,
// and a response must not fail over one. For printable ASCII the result is
// also s as a JSON string, which the problem body of a refusal relies on.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendEscaped(b, s)
	return append(b, '"')
}

// AppendName appends the name of the policy named policy (a Policy.Name,
// "" for an unnamed one) under route (a middleware's route or a gRPC
// method, "" for none), quoted: the policy's own name when it has one (the
// name the user chose for headers and metrics, as it is), else the route,
// else Default. Policies listed in one response by nested middlewares need
// distinct names.
func AppendName(b []byte, route, policy string) []byte {
	b = append(b, '"')
	switch {
	case policy != "":
		b = appendEscaped(b, policy)
	case route != "":
		b = appendEscaped(b, route)
	default:
		b = append(b, Default...)
	}
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
