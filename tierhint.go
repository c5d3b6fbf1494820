package keyrate

import "github.com/keyrate/keyrate/internal/tierhint"

func init() {
	tierhint.ReadsIdentity = func(b any) bool {
		switch b := b.(type) {
		case *Limiter:
			return b.tierOf != nil // tierOf is set once, by New
		case *Concurrency:
			return b.tierOf != nil // likewise, by NewConcurrency
		}
		return true
	}
}
