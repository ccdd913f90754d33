package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CargoBinary is the binary a test runs: $env when set, else target/debug/<name> of the Cargo
// workspace above the test's directory (built by the make target that runs the test).
func CargoBinary(tb testing.TB, env, name string) string {
	tb.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		dir, err := os.Getwd()
		if err != nil {
			tb.Fatal(err)
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "Cargo.lock")); err == nil {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				tb.Fatalf("%s: no Cargo workspace above the test directory; set %s", name, env)
			}
			dir = parent
		}
		bin = filepath.Join(dir, "target", "debug", name)
	}
	if _, err := os.Stat(bin); err != nil {
		tb.Fatalf("%s: %v (run `cargo build --bin %s` or set %s)", name, err, name, env)
	}
	return bin
}

// JSONPath reads one jsonpath of one object with kubectl ("" when absent or on error).
func (c *Env) JSONPath(ns, kind, name, path string) string {
	out, err := c.Kubectl("-n", ns, "get", kind, name, "-o", "jsonpath={"+path+"}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// WaitJSONPath waits until JSONPath returns want.
func (c *Cluster) WaitJSONPath(timeout time.Duration, ns, kind, name, path, want string) {
	c.t.Helper()
	c.Eventually(timeout, fmt.Sprintf("%s/%s %s = %q", kind, name, path, want), func() (bool, error) {
		got := c.JSONPath(ns, kind, name, path)
		return got == want, fmt.Errorf("got %q", got)
	})
}
