// Package images runs kaas from its images: the broker and operator images (built by
// kaas/e2e/imagebuild from the dev build's binaries, or taken from KAAS_E2E_IMAGES_DIR, e.g.
// build/images after `make images`) are pushed into the harness registry, the process kubelet
// pulls them by the names the operator uses by default (ghcr.io/kaas/..., mirrored to the harness
// registry as a containerd mirror would) and runs each pod in the image's own root filesystem as
// its user 65532; a client then produces and consumes through the brokers.
package images

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kaas/e2e/harness"
	"kaas/e2e/imagebuild"
	"kaas/e2e/kaastest"
)

func TestMain(m *testing.M) { harness.Main(m) }

const ns = kaastest.Namespace

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}

func TestImages(t *testing.T) {
	root := repoRoot(t)
	// No image table entry for ghcr.io/kaas: every kaas pod is pulled.
	c := harness.Start(t, kaastest.Pulled(t, harness.Options{}))
	// The shared volume is an export the nonroot user 65532 may write, as an NFS export for
	// these images must be.
	kaastest.WritableByImages(t, c.VolumeDir("shared"))
	c.MustKubectl("apply", "-k", filepath.Join(root, "config", "default"))
	for _, crd := range []string{"kafkaclusters", "kafkatopics", "kafkaclusterassignments"} {
		c.MustKubectl("wait", "--for=condition=Established", "crd/"+crd+".kaas.dev", "--timeout=60s")
	}
	c.Apply(kaastest.Cluster(""))
	c.WaitJSONPath(4*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")

	t.Run("pods run the pulled images as nonroot", func(t *testing.T) {
		c := c.For(t)
		for _, p := range []struct{ ns, selector, repo, bin string }{
			{ns, "app.kubernetes.io/component=broker", "ghcr.io/kaas/kaas", "/kaas"},
			{ns, "app.kubernetes.io/component=volume-agent", "ghcr.io/kaas/kaas-operator", "/kaas-operator"},
			{"kaas-system", "app.kubernetes.io/name=kaas-operator", "ghcr.io/kaas/kaas-operator", "/kaas-operator"},
		} {
			names := strings.Fields(c.MustKubectl("-n", p.ns, "get", "pods", "-l", p.selector, "-o", "jsonpath={.items[*].metadata.name}"))
			if len(names) == 0 {
				t.Fatalf("no pods %s", p.selector)
			}
			for _, name := range names {
				id := c.JSONPath(p.ns, "pod", name, ".status.containerStatuses[0].imageID")
				if !strings.HasPrefix(id, p.repo+"@sha256:") {
					t.Errorf("%s: imageID %q", name, id)
				}
				pid, err := c.PodPID(p.ns, name, "")
				if err != nil {
					t.Fatal(err)
				}
				checkProcess(t, name, pid, p.bin)
			}
		}
	})

	t.Run("produce and consume through the brokers", func(t *testing.T) {
		c := c.For(t)
		c.Apply(kaastest.Topic("orders", 3, ""))
		c.WaitJSONPath(2*time.Minute, ns, "kafkatopic", "orders", `.status.conditions[?(@.type=="Ready")].status`, "True")
		bootstrap := c.PodAddr(ns, "kc-0", 9092) + "," + c.PodAddr(ns, "kc-1", 9092)
		var want []string
		for i := 0; i < 200; i++ {
			want = append(want, fmt.Sprintf("record-%03d", i))
		}
		c.Eventually(2*time.Minute, "produce with acks=all", func() (bool, error) {
			cmd := exec.Command("kcat", "-b", bootstrap, "-t", "orders", "-P", "-X", "acks=all", "-X", "message.timeout.ms=20000")
			cmd.Stdin = strings.NewReader(strings.Join(want, "\n") + "\n")
			out, err := cmd.CombinedOutput()
			return err == nil, fmt.Errorf("kcat -P: %v: %s", err, out)
		})
		var got []string
		c.Eventually(time.Minute, "consume everything back", func() (bool, error) {
			out, err := exec.Command("kcat", "-b", bootstrap, "-t", "orders", "-C", "-e", "-o", "beginning", "-q", "-f", "%s\n").CombinedOutput()
			if err != nil {
				return false, fmt.Errorf("kcat -C: %v: %s", err, out)
			}
			got = strings.Fields(string(out))
			sort.Strings(got)
			return strings.Join(got, " ") == strings.Join(want, " "), fmt.Errorf("read %d records, want %d", len(got), len(want))
		})
	})

	t.Run("a missing image fails as the kubelet fails", func(t *testing.T) {
		c := c.For(t)
		c.Apply(`
apiVersion: v1
kind: Pod
metadata: {name: missing, namespace: default}
spec:
  containers: [{name: c, image: "ghcr.io/kaas/kaas:0.0.0-missing"}]
---
apiVersion: v1
kind: Pod
metadata: {name: never, namespace: default}
spec:
  containers: [{name: c, image: "ghcr.io/kaas/kaas:0.0.0-missing", imagePullPolicy: Never}]
`)
		for _, tc := range []struct{ pod, reason, message string }{
			{"missing", "ErrImagePull", `failed to pull and unpack image "ghcr.io/kaas/kaas:0.0.0-missing"`},
			{"missing", "ImagePullBackOff", `Back-off pulling image "ghcr.io/kaas/kaas:0.0.0-missing"`},
			{"never", "ErrImageNeverPull", `is not present with pull policy of Never`},
		} {
			c.Eventually(time.Minute, tc.pod+" waiting with "+tc.reason, func() (bool, error) {
				reason := c.JSONPath("default", "pod", tc.pod, ".status.containerStatuses[0].state.waiting.reason")
				msg := c.JSONPath("default", "pod", tc.pod, ".status.containerStatuses[0].state.waiting.message")
				return reason == tc.reason && strings.Contains(msg, tc.message), fmt.Errorf("waiting %s: %s", reason, msg)
			})
		}
		c.MustKubectl("delete", "pod", "missing", "never", "--wait=true", "--timeout=60s")
	})
}

// checkProcess checks that a container's process runs as uid/gid 65532 in the image's root: its
// executable is the image's binary, the image's /etc/passwd names nonroot, the host's /usr is
// not there, and the CA bundle SSL_CERT_FILE names is.
func checkProcess(t *testing.T, pod string, pid int, bin string) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	uid := strconv.Itoa(imagebuild.NonrootUID)
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") && (f[1] != uid || f[2] != uid) {
			t.Errorf("%s runs with %s", pod, l)
		}
	}
	procRoot := fmt.Sprintf("/proc/%d/root", pid)
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || !strings.HasSuffix(exe, bin) {
		t.Errorf("%s: exe %q (%v), want %s", pod, exe, err, bin)
	}
	if passwd, err := os.ReadFile(procRoot + "/etc/passwd"); err != nil || !strings.Contains(string(passwd), "nonroot:x:"+uid) {
		t.Errorf("%s: /etc/passwd %q %v", pod, passwd, err)
	}
	if _, err := os.Stat(procRoot + "/usr/bin"); !os.IsNotExist(err) {
		t.Errorf("%s sees /usr/bin (the host's root?): %v", pod, err)
	}
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if !strings.Contains(string(environ), "SSL_CERT_FILE="+imagebuild.CABundle) {
		t.Errorf("%s: no SSL_CERT_FILE in its environment", pod)
	}
	if ca, err := os.ReadFile(procRoot + imagebuild.CABundle); err != nil || !strings.Contains(string(ca), "BEGIN CERTIFICATE") {
		t.Errorf("%s: CA bundle: %v", pod, err)
	}
	// The operator's restricted default, readOnlyRootFilesystem, which the process kubelet
	// enforces for pulled images: the binary runs (and became Ready) with nothing writable but
	// its volumes.
	if err := os.WriteFile(procRoot+"/tmp/written-by-e2e", []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("%s: writing /tmp in its root: %v, want EROFS (readOnlyRootFilesystem)", pod, err)
	}
}
