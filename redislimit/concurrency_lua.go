package redislimit

import "github.com/redis/go-redis/v9"

// A key's in-flight slots are a sorted set of lease ids, each scored by
// the instant its lease lapses, in microseconds since the Unix epoch on
// the Redis server's clock:
//
//	<prefix>{<tag>}<id>:inflight   ZSET  lease id -> lapses at
//
// Whoever takes a slot first drops the lapsed leases, so that a slot held
// by a process that died comes back within a lease's time to live, without
// a sweeper; the holder renews its leases while it holds them. Releasing is
// a ZREM, and Redis deletes a set left empty, so a key with no slot held
// costs nothing; the key also expires when its latest lease lapses, should
// every holder die at once. That is the set's highest score, not the
// writer's own time to live: replicas of different times to live (a
// rolling change of the setting) share a key, and one of a shorter time
// would otherwise expire the others' live leases with it.
//
// Both scripts take ARGV[1], the instant: "" to read the server's TIME, so
// that every replica shares one clock (only tests pass an instant, as they
// do to the decision scripts). Each touches one key, so one Cluster slot.

// slotNow reads the set's key and the instant, and defines keep.
const slotNow = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local key = KEYS[1]
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- keep makes the set expire when its latest lease lapses (ms, rounded up).
local function keep()
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then
    redis.call('PEXPIRE', key, math.max(math.ceil((tonumber(top[2]) - now) / 1000), 1))
  end
end
`

// acquireScript takes a slot: KEYS[1] the set, ARGV[1] the instant,
// ARGV[2] the key's limit, ARGV[3] the time to live in microseconds,
// ARGV[4] the lease id. It returns {1, held} when it took the slot, {0,
// held} when the key holds its limit of live leases; held counts them, the
// new one included.
var acquireScript = redis.NewScript(slotNow + `
local limit = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if held >= limit then
  return {0, held}
end
redis.call('ZADD', key, now + ttl, ARGV[4])
keep()
return {1, held + 1}
`)

// renewScript pushes leases back: KEYS[1] the set, ARGV[1] the instant,
// ARGV[2] the time to live in microseconds, ARGV[3:] the lease ids. A lease no longer in the set (it lapsed and was dropped, or
// was released meanwhile) is not put back: its slot may be someone else's
// by now. It returns how many leases it renewed.
var renewScript = redis.NewScript(slotNow + `
local ttl = tonumber(ARGV[2])
local renewed = 0
for i = 3, #ARGV do
  if redis.call('ZSCORE', key, ARGV[i]) then
    redis.call('ZADD', key, now + ttl, ARGV[i])
    renewed = renewed + 1
  end
end
if renewed > 0 then
  keep()
end
return renewed
`)
