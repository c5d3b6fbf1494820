package redislimit

// WithClock makes decisions at the clock's instants instead of the Redis
// server's TIME, so that the shared behavioural suite's manual clock drives
// this backend too. It exists only in this package's tests.
var WithClock = withClock
