package middleware

import (
	"strings"

	"github.com/keyrate/keyrate/internal/tokenkey"
)

// TokensTier is the tier that TokenTier names for a token budget's tokens
// key (httplimit.WithTokenBudget, grpclimit.WithTokenBudget): give it the
// tokens policies in the backend's tiers. The requests policies are the
// default tier's.
const TokensTier = "tokens"

// TokenTier is the tier function of a token budget's backend
// (keyrate.WithTiers, redislimit.WithTiers): TokensTier for a token
// budget's tokens key (route + "\x00" + identity + "/tokens"), "" (the
// default tier: the requests policies) for any other, its requests key
// ending in "/requests" included. A tier function of your own (a plan per
// client) can call it and read the plan from the key.
func TokenTier(key string) string {
	if strings.HasSuffix(key, tokenkey.TokensSuffix) {
		return TokensTier
	}
	return ""
}

// TokenGroup is the hash-tag function of a token budget's Redis backend
// (redislimit.WithHashTagFunc): the key without its budget's suffix, so
// that a client's two budgets share a Redis Cluster slot and TakeAll can
// decide them in one script run. A key without a suffix keeps its own tag.
func TokenGroup(key string) string {
	if k, ok := strings.CutSuffix(key, tokenkey.TokensSuffix); ok {
		return k
	}
	if k, ok := strings.CutSuffix(key, tokenkey.RequestsSuffix); ok {
		return k
	}
	return ""
}
