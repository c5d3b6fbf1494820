package redislimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// hold records lease of the set sk as held, for renewal, and starts the
// renewal goroutine if none runs. It runs only while leases are held, so
// an idle Concurrency holds no goroutine.
func (c *Concurrency) hold(sk, lease string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.held[sk]
	if ids == nil {
		ids = make(map[string]struct{})
		c.held[sk] = ids
	}
	ids[lease] = struct{}{}
	if !c.renewing && !c.closed {
		c.renewing = true
		c.renewal.Go(c.renewLoop)
	}
}

// renewLoop renews every held lease once per third of the time to live,
// until Close or until none is held.
func (c *Concurrency) renewLoop() {
	t := time.NewTicker(c.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			c.mu.Lock()
			c.renewing = false // and Close keeps hold from starting another
			c.mu.Unlock()
			return
		case <-t.C:
		}
		batch := c.heldLeases(true)
		if batch == nil {
			return
		}
		c.renew(batch)
	}
}

// heldLeases returns the leases held, by set, or nil when none is; with
// stop, it then also marks the renewal goroutine stopped, under the lock
// under which hold starts one.
func (c *Concurrency) heldLeases(stop bool) map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 {
		if stop {
			c.renewing = false
		}
		return nil
	}
	batch := make(map[string][]string, len(c.held))
	for sk, ids := range c.held {
		for id := range ids {
			batch[sk] = append(batch[sk], id)
		}
	}
	return batch
}

// renew pushes back the leases of batch, one script run per set, all in
// one pipeline under the time budget (go-redis splits it by node on a
// Cluster). The sets whose script the server does not have cached get it
// in full, in a second pipeline. A renewal that fails is tried again at
// the next tick; a lease it never reaches lapses, as a dead replica's does.
func (c *Concurrency) renew(batch map[string][]string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	missing := c.renewSets(ctx, batch, false)
	if len(missing) == 0 {
		return
	}
	again := make(map[string][]string, len(missing))
	for _, sk := range missing {
		again[sk] = batch[sk]
	}
	c.renewSets(ctx, again, true)
}

// renewSets runs the renewal script on each set of batch in one pipeline,
// by its SHA or, with full, in full, and returns the sets whose run failed
// because the server did not have the script.
func (c *Concurrency) renewSets(ctx context.Context, batch map[string][]string, full bool) []string {
	cmds := make(map[string]*redis.Cmd, len(batch))
	c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sk, ids := range batch {
			args := make([]any, 2, 2+len(ids))
			args[0], args[1] = c.now(), c.ttl.Microseconds()
			for _, id := range ids {
				args = append(args, id)
			}
			if full {
				cmds[sk] = renewScript.Eval(ctx, p, []string{sk}, args...)
			} else {
				cmds[sk] = renewScript.EvalSha(ctx, p, []string{sk}, args...)
			}
		}
		return nil
	})
	var missing []string
	for sk, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			missing = append(missing, sk)
		}
	}
	return missing
}
