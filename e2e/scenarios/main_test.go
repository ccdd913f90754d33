// Package scenarios runs the seeds' end-to-end flows (seeds 000–003) against a real kaas
// cluster: the operator installed from config/, three `kaas` brokers in cluster mode as its
// StatefulSet, each node's pods reaching the shared claim through their own mount of kaas-nfsfs
// (NFS client semantics), and franz-go as the Kafka client. Every scenario checks that the
// records acknowledged to the client are exactly the records read back.
package scenarios

import (
	"os"
	"path/filepath"
	"testing"

	"kaas/e2e/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// repoRoot is the repository root (e2e/scenarios/../..).
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}
