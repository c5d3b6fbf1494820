package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
)

// redisOptions are the settings of a store in Redis (see the -redis flags).
type redisOptions struct {
	addr         string   // one server's host:port
	cluster      []string // or a Redis Cluster's seed nodes
	prefix       string
	timeout      time.Duration
	denyCache    int           // keys; 0: no deny cache
	denyHold     time.Duration // 0: redislimit's default
	fallback     float64       // the local fallback's share; 0: none
	fallbackKeys int           // the fallback's bound on keys; 0: redislimit's default
	resolution   time.Duration // 0: none
	leases       time.Duration // redislimit.WithLeases; 0: none
	secretFile   string        // the hash tag secret's file; "": no secret
	conn         redisConn     // how to reach it, beyond the addresses (redisclient.go)
}

// defaultRedisPrefix starts every key keyrate-rls writes in Redis.
const defaultRedisPrefix = "keyrate-rls:"

// redisStore keeps budgets in Redis, shared by every keyrate-rls that uses
// it: one redislimit.Limiter, a tier per rule as in process. A request's
// keys are decided by one script run, so they must share a Redis Cluster
// slot: each key sent to Redis starts with the request's domain, and the
// hash tag is made from the domain alone (redislimit.WithHashTagFunc). A
// domain's budgets then live on one master, which decides its requests
// all or nothing; a busy domain is a busy slot.
type redisStore struct {
	l      *redislimit.Limiter
	client redis.UniversalClient
	names  *tierNames
}

// newRedisStore connects to the Redis that o names, checks that it
// answers, and returns a store there.
func newRedisStore(ctx context.Context, o redisOptions) (*redisStore, error) {
	client := o.newClient()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("no Redis at %s: %w", o.where(), err)
	}
	names := &tierNames{}
	opts := []redislimit.Option{
		redislimit.WithTiers(names.redisTierOf, nil),
		redislimit.WithHashTagFunc(domainOf),
		redislimit.WithPrefix(o.prefix),
		redislimit.WithTimeout(o.timeout),
	}
	if o.denyCache > 0 {
		opts = append(opts, redislimit.WithDenyCache(o.denyCache))
		if o.denyHold > 0 {
			opts = append(opts, redislimit.WithDenyCacheMaxHold(o.denyHold))
		}
	}
	if o.fallback > 0 {
		opts = append(opts, redislimit.WithLocalFallback(o.fallback))
		if o.fallbackKeys > 0 {
			opts = append(opts, redislimit.WithLocalFallbackMaxKeys(o.fallbackKeys))
		}
	}
	if o.resolution > 0 {
		opts = append(opts, redislimit.WithResolution(o.resolution))
	}
	if o.leases > 0 {
		opts = append(opts, redislimit.WithLeases(o.leases))
	}
	if o.secretFile != "" {
		secret, err := os.ReadFile(o.secretFile)
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("the hash tag secret: %w", err)
		}
		opts = append(opts, redislimit.WithHashTagSecret([]byte(strings.TrimSpace(string(secret)))))
	}
	l, err := redislimit.NewPolicies(client, []keyrate.Policy{placeholderPolicy}, opts...)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &redisStore{l: l, client: client, names: names}, nil
}

// where names the Redis o connects to, for errors.
func (o redisOptions) where() string {
	if len(o.cluster) > 0 {
		nodes := make([]string, len(o.cluster))
		for i, n := range o.cluster {
			nodes[i] = redactAddr(n)
		}
		return "cluster " + strings.Join(nodes, ",")
	}
	return redactAddr(o.addr)
}

// TakeAll decides the request in Redis, in one script run.
func (s *redisStore) TakeAll(ctx context.Context, domain string, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	in := make([]keyrate.Hit, len(hits))
	for i, h := range hits {
		in[i] = keyrate.Hit{Key: redisKey(domain, h.Key), Weight: h.Weight}
	}
	return s.l.TakeAll(ctx, in)
}

// SetTier sets a rule's policies on the limiter (and its local fallback).
func (s *redisStore) SetTier(name string, policies []keyrate.Policy) error {
	return s.l.SetTier(name, policies)
}

// Close closes the connection to Redis; the budgets stay there.
func (s *redisStore) Close() error {
	s.l.Close() // gives back the leases' unused parts
	return s.client.Close()
}

// redisKey returns the key of a budget in Redis: the length of the domain
// (a uvarint), the domain, then the key of the budget as in process (see
// storeKey), so that domainOf and redisTierOf read both back whatever
// bytes the domain holds.
func redisKey(domain, key string) string {
	b := make([]byte, 0, binary.MaxVarintLen64+len(domain)+len(key))
	b = binary.AppendUvarint(b, uint64(len(domain)))
	b = append(b, domain...)
	return string(append(b, key...))
}

// splitRedisKey returns the domain and the in-process key of a key
// redisKey made; ok is false for any other string.
func splitRedisKey(k string) (domain, key string, ok bool) {
	n, w := binary.Uvarint([]byte(k[:min(len(k), binary.MaxVarintLen64)]))
	if w <= 0 || uint64(len(k)-w) < n {
		return "", "", false
	}
	return k[w : w+int(n)], k[w+int(n):], true
}

// domainOf is the limiter's hash tag function: a budget's domain.
func domainOf(k string) string {
	domain, _, _ := splitRedisKey(k)
	return domain
}

// redisTierOf is the limiter's tier function: the tier of the in-process
// key within (see tierOf); "" (the placeholder) for a key it cannot read.
func redisTierOf(k string) string {
	_, key, ok := splitRedisKey(k)
	if !ok {
		return ""
	}
	return tierOf(key)
}

// parseRedisFlags checks the Redis flags: -redis addr or -redis-cluster
// nodes (each host:port, or a redis:// or rediss:// URL read as go-redis
// reads it, whose credentials, database and TLS then apply), and the other -redis-... options, those in set given explicitly,
// read into r. It returns the store's settings, or nil for budgets in
// process.
func parseRedisFlags(addr, cluster string, set []string, r redisOptions) (*redisOptions, error) {
	switch {
	case addr != "" && cluster != "":
		return nil, errors.New("-redis and -redis-cluster are exclusive: give one server or a Cluster's nodes")
	case addr == "" && cluster == "":
		if len(set) > 0 {
			return nil, fmt.Errorf("%s need -redis or -redis-cluster: budgets in process have no Redis", strings.Join(set, ", "))
		}
		return nil, nil
	case r.fallback < 0 || r.fallback > 1 || r.fallback != r.fallback:
		return nil, fmt.Errorf("-redis-fallback is %v, want a share in (0, 1], or 0 for none", r.fallback)
	case r.timeout <= 0:
		return nil, fmt.Errorf("-redis-timeout is %v, want more than 0", r.timeout)
	case r.denyCache < 0:
		return nil, fmt.Errorf("-redis-deny-cache is %d, want 0 (none) or more", r.denyCache)
	case r.denyHold < 0 || r.denyHold > 0 && r.denyCache == 0:
		return nil, fmt.Errorf("-redis-deny-cache-max-hold is %v, want more than 0, with -redis-deny-cache", r.denyHold)
	case r.resolution < 0:
		return nil, fmt.Errorf("-redis-resolution is %v, want 0 (none) or more", r.resolution)
	case r.leases < 0:
		return nil, fmt.Errorf("-redis-leases is %v, want 0 (none) or more", r.leases)
	}
	r.addr = addr
	if isRedisURL(addr) {
		var err error
		if r.addr, err = parseRedisURL("-redis", addr, &r.conn); err != nil {
			return nil, err
		}
	}
	if cluster != "" {
		r.cluster = strings.Split(cluster, ",")
		for i, node := range r.cluster {
			if isRedisURL(node) {
				var err error
				if r.cluster[i], err = parseRedisURL("-redis-cluster", node, &r.conn); err != nil {
					return nil, err
				}
			}
		}
	}
	return &r, nil
}
