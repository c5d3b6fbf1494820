package redislimit_test

import (
	"os"
	"testing"

	"github.com/keyrate/keyrate/redislimit/redistest"
)

// TestMain starts one redis-server for the package's tests and benchmarks
// (the fault tests start their own). A helper process (see
// TestHelperProcess) uses its parent's server instead.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run())
	}
	os.Exit(redistest.Main(m))
}
