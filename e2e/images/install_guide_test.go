package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

// guideHeading is the README section TestInstallGuide follows.
const guideHeading = "## Install on Kubernetes"

// skipMarker, on the line before a block, leaves that block out of the test (with the reason).
const skipMarker = "<!-- install-test: skip"

// laptopMarker, on the line before a block, runs that block's kcat on the harness' laptop: a
// machine outside the cluster that reaches only the nodes and the load balancers.
const laptopMarker = "<!-- install-test: laptop"

// guideBlock is one ```sh block of the guide.
type guideBlock struct {
	script string
	skip   bool
	laptop bool
}

// guideBlocks returns the ```sh blocks of the README section under guideHeading, in order.
func guideBlocks(readme string) ([]guideBlock, error) {
	start := strings.Index(readme, "\n"+guideHeading+"\n")
	if start < 0 {
		return nil, fmt.Errorf("README.md has no %q section", guideHeading)
	}
	section := readme[start+len(guideHeading)+2:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var blocks []guideBlock
	var current *guideBlock
	previous := ""
	for _, line := range strings.Split(section, "\n") {
		switch {
		case current == nil && line == "```sh":
			current = &guideBlock{skip: strings.HasPrefix(previous, skipMarker), laptop: strings.HasPrefix(previous, laptopMarker)}
		case current != nil && line == "```":
			blocks = append(blocks, *current)
			current = nil
		case current != nil:
			current.script += line + "\n"
		}
		if strings.TrimSpace(line) != "" {
			previous = line
		}
	}
	if current != nil {
		return nil, fmt.Errorf("an unclosed ```sh block in %q", guideHeading)
	}
	return blocks, nil
}

// TestInstallGuide runs the README's "Install on Kubernetes" as a newcomer would: each of its
// shell blocks, in order and as written, with kubectl on a real control plane. What the guide
// takes as given is made first, the way a cluster's administrator would have it: the operator's
// and broker's images under their published names (built from this checkout and served by the
// harness registry as a mirror of ghcr.io), a ReadWriteMany StorageClass `nfs` with a volume the
// brokers' user may write, and kcat for `edenhill/kcat` (the machine's own).
func TestInstallGuide(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := guideBlocks(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	c := harness.Start(t, kaastest.Pulled(t, harness.Options{Images: map[string]string{"edenhill/kcat*": "host"}}))

	// The StorageClass the sample names, with one volume, as an NFS provisioner would make it.
	export := c.VolumeDir("nfs-export")
	if err := os.MkdirAll(export, 0o755); err != nil {
		t.Fatal(err)
	}
	kaastest.WritableByImages(t, export)
	c.Apply(fmt.Sprintf(`
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: nfs}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: nfs-export}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: nfs
  hostPath: {path: %q}
`, export))

	// kubectl on PATH with the cluster's kubeconfig, as in the newcomer's shell.
	env := append(os.Environ(),
		"PATH="+filepath.Dir(c.KubectlBinary())+":"+os.Getenv("PATH"),
		"KUBECONFIG="+c.Kubeconfig)
	ran := 0
	for i, b := range blocks {
		if b.skip {
			t.Logf("block %d: skipped (marked in the README)", i+1)
			continue
		}
		ran++
		start := time.Now()
		// A block that hangs fails the test rather than the whole run's time budget.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", b.script)
		cmd.Dir, cmd.Env = root, env
		if b.laptop {
			cmd.Env = append(env, "PATH="+laptopKcat(t, c)+":"+filepath.Dir(c.KubectlBinary())+":"+os.Getenv("PATH"))
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("block %d (%s):\n%s%s", i+1, time.Since(start).Round(time.Second), b.script, indent(out.String()))
		if err != nil {
			t.Fatalf("block %d of the install guide failed: %v", i+1, err)
		}
		// The guide's read-back: every record produced, once.
		if strings.Contains(b.script, "logs kcat-consumer") {
			lines := strings.Fields(strings.TrimSpace(out.String()))
			if len(lines) == 0 || lines[len(lines)-1] != "1000" {
				t.Fatalf("the consumer read back %q distinct records, want 1000", lines)
			}
			checkPortForward(t, c)
		}
		// From the laptop, through the external listener: the same records.
		if b.laptop {
			lines := strings.Fields(strings.TrimSpace(out.String()))
			if len(lines) == 0 || lines[len(lines)-1] != "1000" {
				t.Fatalf("the laptop read %q records through the external listener, want 1000", lines)
			}
		}
	}
	if ran < 4 {
		t.Fatalf("only %d blocks of the install guide ran; the README's section changed shape?", ran)
	}
	// The uninstall left nothing of kaas behind.
	if out, err := c.Kubectl("get", "crd", "kafkaclusters.kaas.dev"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("the KafkaCluster CRD is still there after the uninstall: %v %s", err, out)
	}
	for _, ns := range []string{"kafka", "kaas-system"} {
		if out, err := c.Kubectl("get", "namespace", ns); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("namespace %s is still there after the uninstall: %v %s", ns, err, out)
		}
	}
}

// checkPortForward checks what the guide says of a laptop: `kubectl port-forward` reaches a
// broker, which listens on localhost in its pod's own network namespace. (The rest of that block
// edits /etc/hosts and is not run.) Metadata asked through the forward lists the three brokers.
func checkPortForward(t *testing.T, c *harness.Cluster) {
	t.Helper()
	c.PortForward("kafka", "pod/demo-0", "19092:9092")
	// The controller lists a broker once its endpoint is serving and it heartbeats: the last
	// broker to turn ready may join the assignment a recompute (2 s) after the cluster is Ready.
	c.Eventually(time.Minute, "metadata through the forward lists three brokers", func() (bool, error) {
		out, err := exec.Command("kcat", "-b", "127.0.0.1:19092", "-L", "-m", "10").CombinedOutput()
		return err == nil && strings.Contains(string(out), "3 brokers:"), fmt.Errorf("kcat -L: %v\n%s", err, out)
	})
}

// laptopKcat is a directory with a `kcat` that runs the machine's kcat on the cluster's laptop
// (the rest of a laptop block — kubectl — runs as the other blocks do: a laptop reaches the API
// server too, which the harness' laptop namespace does not route).
func laptopKcat(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	laptop, err := c.Laptop()
	if err != nil {
		t.Fatal(err)
	}
	// The machine's kcat by its path: the wrapper is first on the block's PATH.
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal(err)
	}
	cmd := laptop.Command(kcat)
	quoted := []string{"'" + cmd.Path + "'"}
	for _, arg := range cmd.Args[1:] {
		quoted = append(quoted, "'"+strings.ReplaceAll(arg, "'", `'\''`)+"'")
	}
	dir := t.TempDir()
	script := "#!/bin/sh\nexec " + strings.Join(quoted, " ") + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kcat"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    | " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    | ") + "\n"
}
