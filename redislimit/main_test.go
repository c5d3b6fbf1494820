package redislimit_test

import (
	"os"
	"testing"

	"github.com/keyrate/keyrate/redislimit/redistest"
)

// TestMain starts one redis-server for the package's tests and benchmarks
// (the fault tests start their own). A helper process (TestHelperProcess,
// TestLeaseHelperProcess) uses its parent's server instead: one of its own
// would outlive a helper killed by SIGKILL.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" || os.Getenv(leaseHelperEnv) != "" {
		os.Exit(m.Run())
	}
	os.Exit(redistest.Main(m))
}
