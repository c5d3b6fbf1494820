package keyrate

import "github.com/keyrate/keyrate/internal/tierhint"

func init() {
	tierhint.ReadsIdentity = func(b any) bool {
		l, ok := b.(*Limiter)
		return !ok || l.tierOf != nil // tierOf is set once, by New
	}
}
