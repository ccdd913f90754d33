package selftest

import (
	"testing"

	"kaas/e2e/harness"
)

// TestMain builds the binaries and moves the tests into the harness' network namespace.
func TestMain(m *testing.M) { harness.Main(m) }
