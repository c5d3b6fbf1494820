// Package benchcmp holds benchmarks and agreement tests that put redislimit
// side by side with other Redis-backed rate limiters: go-redis/redis_rate
// (GCRA) and ulule/limiter's Redis store (fixed window). It lives in the
// development module so that those libraries never enter redislimit's
// go.mod; it has no code to import, only tests (from the repository root):
//
//	go test -run '^$' -bench . -count 5 ./dev/benchcmp | tee results.txt
//	benchstat -col /lib results.txt
//
// One run gives the three comparisons redislimit's README reports: the
// sliding log's time per admitted decision against redis_rate's (workload
// Admitted), a hot key's decisions per second with the deny cache against
// redis_rate's (HotKey, lib keyrate-SlidingLog-DenyCache), and round trips
// per decision (the roundtrips/op metric). admitted/op shows what share of
// each workload's calls were admitted. With the deny cache's default
// maximum hold of 1s, the hot key goes to Redis about once a second of the
// run, so its round trips per decision fall with the run's length. Every
// library talks to the same redis-server, started by each test and
// benchmark on a free loopback port.
//
// TestMemoryPerKey prints what Redis reports per client key (MEMORY USAGE)
// once keys are filled to their limit, for each library under the same
// policies, as a Markdown table:
//
//	KEYRATE_MEMORY_TABLE=1 go test -run TestMemoryPerKey -v ./dev/benchcmp
//
// It takes about four minutes, as a key under 10 per second takes 100
// seconds of the server's clock to reach 1,000 a day (200 at a second's
// resolution), and is skipped without the variable.
//
// TestThroughput puts the libraries through 1, 32 and 128 concurrent
// callers on distinct keys, every call admitted, and prints decisions per
// second, each call's latency (p50, p99), the server's CPU per decision
// (INFO cpu) and the commands Redis ran per decision (INFO commandstats),
// as a Markdown table (KEYRATE_THROUGHPUT_ROUNDS, _SECONDS and _LIBS
// shape the run):
//
//	KEYRATE_THROUGHPUT_TABLE=1 go test -run TestThroughput -v ./dev/benchcmp
package benchcmp
