package backend

import (
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/access"
)

var (
	newReceipt = access.NewReceipt.(func(time.Time, int, uint64) keyrate.Receipt)
	receiptAt  = access.ReceiptAt.(func(keyrate.Receipt) time.Time)
	receiptID  = access.ReceiptID.(func(keyrate.Receipt) uint64)
)

// NewReceipt returns the Receipt of n events recorded at instant at, in the
// store a backend other than *keyrate.Limiter calls id.
func NewReceipt(at time.Time, n int, id uint64) keyrate.Receipt {
	return newReceipt(at, n, id)
}

// ReceiptAt returns the instant r's events were decided at, on the
// backend's clock.
func ReceiptAt(r keyrate.Receipt) time.Time { return receiptAt(r) }

// ReceiptID returns what the backend calls the store that holds r's events.
func ReceiptID(r keyrate.Receipt) uint64 { return receiptID(r) }
