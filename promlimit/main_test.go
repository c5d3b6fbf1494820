package promlimit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// No test leaves a goroutine behind, the time budget's included.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
