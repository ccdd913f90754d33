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

// operatorBinary is the kaas-operator binary under test: $KAAS_OPERATOR_BIN, else the debug
// build (`cargo build -p kaas-operator`, which `make operator-e2e` runs first).
func operatorBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KAAS_OPERATOR_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(t), "target", "debug", "kaas-operator")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("operator binary: %v (run `cargo build -p kaas-operator` or set KAAS_OPERATOR_BIN)", err)
	}
	return bin
}

// brokerBinary is the kaas broker under test: $KAAS_BIN, else the debug build
// (`cargo build -p kaas`, which `make operator-e2e` runs first).
func brokerBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KAAS_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(t), "target", "debug", "kaas")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("broker binary: %v (run `cargo build -p kaas` or set KAAS_BIN)", err)
	}
	return bin
}
