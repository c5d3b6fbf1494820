package main

import "sync"

// tierNames maps the tier part of a budget's key to the store's tier that
// decides it: a rule's key names its tier itself; an override's names the
// override (see overrides), and the tier is the slot the override holds
// now, so that an override keeps its budgets whichever slot it holds.
//
// A decision reads the slot through tierOf, then the slot's policies. An
// override's slot is given to another override only after the first is
// taken out of slots, and the slot's new policies are set only then: a
// decision that still read the old slot reads the old policies too,
// unless it was held up between the two reads while the slot changed
// hands, a matter of nanoseconds for one decision.
type tierNames struct {
	slots sync.Map // an override's tier part -> the name of its slot
}

// tierOf is the stores' tier function: the tier of a key storeKey made,
// "" (the placeholder, which admits next to nothing) for an override that
// holds no slot.
func (n *tierNames) tierOf(key string) string {
	t := tierOf(key)
	if len(t) == 0 || t[0] != overridePrefix {
		return t
	}
	if s, ok := n.slots.Load(t); ok {
		return s.(string)
	}
	return ""
}

// redisTierOf is tierOf for a key redisKey made.
func (n *tierNames) redisTierOf(k string) string {
	_, key, ok := splitRedisKey(k)
	if !ok {
		return ""
	}
	return n.tierOf(key)
}

func (s *limiterStore) tierNames() *tierNames { return s.names }

func (s *redisStore) tierNames() *tierNames { return s.names }
