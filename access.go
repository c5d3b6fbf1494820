package keyrate

import "github.com/keyrate/keyrate/internal/access"

// init hands package backend the implementations it exports (see
// internal/access).
func init() {
	access.CheckPolicies = checkPolicies
	access.Combine = combineInline
	access.CombineMany = combine
	access.NewReceipt = newReceipt
	access.ReceiptAt = receiptAt
	access.ReceiptID = receiptID
	access.Period = Calendar.bounds
	access.TierField = tierField
	access.TierOf = tierOfContext
}
