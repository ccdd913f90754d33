package selftest

import (
	"strings"
	"testing"

	"kaas/e2e/harness"
)

// TestClusterComesUp checks the control plane answers kubectl and the process kubelet's node is
// Ready (Start waits for that).
func TestClusterComesUp(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	out := c.MustKubectl("get", "nodes", "-o", "wide")
	t.Log(out)
	if !strings.Contains(out, "Ready") {
		t.Fatalf("no Ready node:\n%s", out)
	}
	t.Log(c.MustKubectl("version"))
}
