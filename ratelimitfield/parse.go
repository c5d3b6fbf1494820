package ratelimitfield

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Quota is one member of a RateLimit field, as a server sent it: what a
// client has left of one of its policies.
type Quota struct {
	// Name is the policy's name.
	Name string
	// Remaining is r: the quota units left.
	Remaining int64
	// Reset is t, the time until more quota comes back, in whole seconds;
	// valid when HasReset is set.
	Reset    time.Duration
	HasReset bool
}

// errSyntax is wrapped by ParseRateLimit's errors.
var errSyntax = errors.New("ratelimitfield: not a RateLimit field")

// ParseRateLimit reads the RateLimit field of a response, given as the
// lines of the field (http.Header.Values), into its members, in order: a
// client of a rate-limited API learns from them how much it has left. A
// field of several lines is one list, as for every list field.
//
// It reads the field of the revisions this package writes, a Structured
// Field List (RFC 8941) whose members are a policy's name, a string or a
// token, with the parameters r (required, an integer of at least 0) and t
// (an integer of at least 0), and skips every other parameter, as the
// draft asks. It returns an error for a value that is not such a list, or
// a member without r: a client must then act as if the field were absent.
func ParseRateLimit(lines []string) ([]Quota, error) {
	var qs []Quota
	for _, line := range lines {
		p := parser{s: line}
		p.space()
		for !p.done() {
			q, err := p.member()
			if err != nil {
				return nil, fmt.Errorf("%w: %w", errSyntax, err)
			}
			qs = append(qs, q)
			p.space()
			if p.done() {
				break
			}
			if !p.eat(',') {
				return nil, fmt.Errorf("%w: want ',' at byte %d", errSyntax, p.i)
			}
			p.space()
			if p.done() {
				return nil, fmt.Errorf("%w: a trailing ','", errSyntax)
			}
		}
	}
	return qs, nil
}

// parser reads the subset of Structured Field syntax a RateLimit field
// uses; every value it cannot read is an error, never a guess.
type parser struct {
	s string
	i int
}

func (p *parser) done() bool { return p.i >= len(p.s) }

func (p *parser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// space skips optional whitespace (OWS: spaces and tabs).
func (p *parser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// member reads a name and its parameters.
func (p *parser) member() (Quota, error) {
	var q Quota
	name, err := p.item()
	if err != nil {
		return q, err
	}
	s, ok := name.(string)
	if !ok {
		return q, fmt.Errorf("a member named %v, want a string or a token", name)
	}
	q.Name = s
	hasR := false
	for p.eat(';') {
		p.space()
		key := p.key()
		if key == "" {
			return q, fmt.Errorf("want a parameter's name at byte %d", p.i)
		}
		var v any = true // a bare key is the boolean true
		if p.eat('=') {
			if v, err = p.item(); err != nil {
				return q, err
			}
		}
		switch key {
		case "r":
			n, ok := v.(int64)
			if !ok || n < 0 {
				return q, fmt.Errorf("r=%v, want an integer >= 0", v)
			}
			q.Remaining, hasR = n, true
		case "t":
			n, ok := v.(int64)
			if !ok || n < 0 {
				return q, fmt.Errorf("t=%v, want an integer >= 0", v)
			}
			q.Reset, q.HasReset = time.Duration(n)*time.Second, true
		}
	}
	if !hasR {
		return q, fmt.Errorf("member %q has no r", q.Name)
	}
	return q, nil
}

// key reads a parameter's name: lower case, digits, _ - . *, starting
// with a letter or *.
func (p *parser) key() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		ok := c >= 'a' && c <= 'z' || c == '*' || p.i > start && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')
		if !ok {
			break
		}
		p.i++
	}
	return p.s[start:p.i]
}

// item reads a bare item: a string or a token (as a string), an integer
// (int64), a decimal (float64), a boolean, or a byte sequence (skipped).
func (p *parser) item() (any, error) {
	if p.done() {
		return nil, errors.New("the value ends where an item should be")
	}
	switch c := p.s[p.i]; {
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '?':
		p.i++
		if p.eat('1') {
			return true, nil
		}
		if p.eat('0') {
			return false, nil
		}
		return nil, fmt.Errorf("a boolean that is not ?0 or ?1 at byte %d", p.i)
	case c == ':': // a byte sequence, such as the draft's partition key pk
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, errors.New("a byte sequence that does not end")
		}
		for _, c := range []byte(p.s[p.i+1 : p.i+1+end]) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
				return nil, fmt.Errorf("a byte %#x in a byte sequence", c)
			}
		}
		p.i += end + 2
		return []byte(nil), nil // no parameter read here holds one
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		start := p.i
		for p.i < len(p.s) && tokenChar(p.s[p.i]) {
			p.i++
		}
		return p.s[start:p.i], nil
	}
	return nil, fmt.Errorf("an item that is not a string, a token, a number or a boolean at byte %d", p.i)
}

// tokenChar reports whether c may follow a token's first character.
func tokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// str reads an sf-string: printable ASCII between quotes, \ escaping " and
// \ alone.
func (p *parser) str() (string, error) {
	p.i++ // the opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return b.String(), nil
		case c == '\\':
			if p.i >= len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return "", fmt.Errorf("a bad escape at byte %d", p.i)
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("a byte %#x in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("a string that does not end")
}

// number reads an sf-integer (at most 15 digits) or an sf-decimal.
func (p *parser) number() (any, error) {
	start := p.i
	p.eat('-')
	digits, dot := 0, false
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '.' && !dot {
			dot = true
		} else if c < '0' || c > '9' {
			break
		} else {
			digits++
		}
		p.i++
	}
	text := p.s[start:p.i]
	if digits == 0 || digits > 15 || strings.HasSuffix(text, ".") {
		return nil, fmt.Errorf("a number %q", text)
	}
	if dot {
		return strconv.ParseFloat(text, 64)
	}
	return strconv.ParseInt(text, 10, 64)
}
