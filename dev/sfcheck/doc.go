// Package sfcheck checks that the RateLimit fields keyrate writes, in every
// ratelimitfield.Revision, are Structured Field Lists that an RFC 9651
// parser (github.com/dunglas/httpsfv) reads back as the draft defines
// them. It lives in the development module so that the parser never
// becomes a requirement of the core module. It has no code but its tests.
package sfcheck
