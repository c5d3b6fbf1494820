// Package benchcmp holds benchmarks and agreement tests that put redislimit
// side by side with other Redis-backed rate limiters: go-redis/redis_rate
// (GCRA) and ulule/limiter's Redis store (fixed window). It is a module of
// its own so that those libraries never enter redislimit's go.mod; it has no
// code to import, only tests:
//
//	go test -run '^$' -bench . -count 5 ./redislimit/benchcmp
package benchcmp
