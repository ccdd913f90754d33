// Package operator holds the kaas operator's e2e scenarios: the operator installed from
// config/ runs as its Deployment on the harness' real control plane, and its volume agent as
// the Deployment the operator creates, both from target/debug/kaas-operator through the image
// table; brokers are the real `kaas` binary in cluster mode (target/debug/kaas).
package operator

import (
	"os"
	"path/filepath"
	"testing"

	"kaas/e2e/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// repoRoot is the repository root (e2e/operator/../..).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}
