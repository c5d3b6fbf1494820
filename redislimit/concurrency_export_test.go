package redislimit

import "github.com/keyrate/keyrate/clientkey"

// SlotKey returns the Redis key of key's in-flight slots.
func (c *Concurrency) SlotKey(key string) string {
	id := clientkey.Bound(key)
	return c.slotKey(id, c.tags.of(id))
}

// RenewNow renews every lease c holds at once, as its renewal goroutine
// does every third of the time to live, and reports whether any was held.
func (c *Concurrency) RenewNow() bool {
	batch := c.heldLeases(false)
	if batch == nil {
		return false
	}
	c.renew(batch)
	return true
}

// Renewing reports whether c's renewal goroutine runs.
func (c *Concurrency) Renewing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.renewing
}
