package redislimit

import (
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// Tiered reports whether the Limiter has a tier function (WithTiers): its
// decisions then depend on the identity a context carries
// (backend.ContextWithIdentity), which middleware hands it.
func (l *Limiter) Tiered() bool { return l.tierOf != nil }

// Tiered reports whether the Concurrency has a tier function (WithTiers):
// its limits then depend on the identity a context carries.
func (c *Concurrency) Tiered() bool { return c.tierOf != nil }

var (
	_ keyrate.Backend   = (*Limiter)(nil)
	_ backend.Refunder  = (*Limiter)(nil)
	_ backend.Described = (*Limiter)(nil)
	_ backend.Bounded   = (*Limiter)(nil)
)
