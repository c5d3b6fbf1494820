package main

import (
	"strconv"
	"strings"
	"time"
)

// parsePolicy reads the quota and window from a RateLimit-Policy field as
// the IETF draft writes it, such as `"status";q=3;w=60`, taking the first
// policy when there are several. ok is false when either is missing or
// invalid. It accepts nothing it does not understand.
func parsePolicy(field string) (limit int, window time.Duration, ok bool) {
	first, _, _ := strings.Cut(field, ",")
	params := strings.Split(first, ";")
	if len(params) < 2 {
		return 0, 0, false
	}
	for _, p := range params[1:] {
		name, value, found := strings.Cut(strings.TrimSpace(p), "=")
		if !found {
			continue
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < 1 || n > 1<<31-1 {
			continue
		}
		switch name {
		case "q":
			limit = int(n)
		case "w":
			window = time.Duration(n) * time.Second
		}
	}
	return limit, window, limit > 0 && window > 0
}
