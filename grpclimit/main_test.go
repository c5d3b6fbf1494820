package grpclimit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every server, client and backend call a test starts is gone when it ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
