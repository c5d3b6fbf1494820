// Package librarybench measures the well-kept libraries that could stand
// in for code keyrate writes by hand, on the workloads that code serves,
// beside the benchmarks of keyrate's own: sony/gobreaker against the Redis
// backend's circuit breaker (redislimit's BenchmarkBreakerClosed), and
// jellydator/ttlcache and hashicorp/golang-lru's expirable LRU against its
// deny cache (redislimit's BenchmarkDenyCache). keyrate-load's loop around
// vegeta's attacker is measured in its own module (BenchmarkAttackLoop).
// The numbers, and what was chosen, are in comments at the code: breaker.go
// and denycache.go in redislimit, attack.go in cmd/keyrate-load.
//
// It holds no code of its own; `go test -bench . ./dev/librarybench` runs
// it, beside `go test -bench 'BreakerClosed|DenyCache' ./redislimit`.
package librarybench
