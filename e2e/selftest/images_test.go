package selftest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"kaas/e2e/harness"
	"kaas/e2e/imagebuild"
)

const pulledManifests = `
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: pulled}
---
apiVersion: v1
kind: Pod
metadata: {name: pulled}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: REGISTRY/selftest/testpod:1
    args: ["-show", "/etc/config,/etc/passwd,/scratch"]
    env:
    - {name: OVERRIDDEN, value: by-pod}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    # An exec probe runs the image's own binary, in the container's root.
    readinessProbe: {exec: {command: [/testpod, -h]}, periodSeconds: 1}
    livenessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
    volumeMounts:
    - {name: config, mountPath: /etc/config}
    - {name: scratch, mountPath: /scratch}
  volumes:
  - {name: config, configMap: {name: settings}}
  - {name: scratch, emptyDir: {}}
---
apiVersion: v1
kind: Pod
metadata: {name: asroot}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 0}
  containers:
  - {name: main, image: REGISTRY/selftest/testpod:1}
`

// TestPulledImage runs testpod from an image in the harness registry rather than from the
// image table: the kubelet pulls it by reference, runs the image's entrypoint with the pod's
// args in the image's own root (an overlay, with the pod's volumes and /etc/hosts mounted in it)
// as the image's user 65532, with the image's environment under the pod's; an exec probe runs
// the image's binary; a restart gets a fresh writable layer; runAsNonRoot with runAsUser 0 is
// refused as the kubelet refuses it.
func TestPulledImage(t *testing.T) {
	img, err := imagebuild.Build(imagebuild.Spec{Binary: harness.TestpodBinary(), Path: "/testpod",
		Entrypoint: []string{"/testpod"}, Cmd: []string{"-show", "/image-cmd-was-run"}, Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Config.Env = append(cf.Config.Env, "FROM_IMAGE=yes", "OVERRIDDEN=by-image")
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(t.TempDir(), "testpod")
	if err := imagebuild.WriteLayout(layout, img, "selftest/testpod", []string{"1"}); err != nil {
		t.Fatal(err)
	}
	c := harness.Start(t, harness.Options{RegistryImages: map[string]string{layout: "selftest/testpod"}})
	c.Apply(strings.ReplaceAll(pulledManifests, "REGISTRY", c.Registry))
	p := c.WaitPodReady("default", "pulled", time.Minute)
	digest, _ := img.Digest()
	if id := p.Status.ContainerStatuses[0].ImageID; id != c.Registry+"/selftest/testpod@"+digest.String() {
		t.Errorf("imageID %q", id)
	}
	logs := c.PodLogs("default", "pulled", "main")
	for _, want := range []string{
		"env: FROM_IMAGE=yes", "env: OVERRIDDEN=by-pod", "env: HOME=/home/nonroot", "env: SSL_CERT_FILE=" + imagebuild.CABundle,
		`file: /etc/config/mode: "pulled"`, "file: /etc/passwd: \"root:x:0:0", "nonroot:x:65532:65532",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "/image-cmd-was-run") {
		t.Errorf("the pod's args did not replace the image's cmd:\n%s", logs)
	}
	pid, err := c.PodPID("default", "pulled", "main")
	if err != nil {
		t.Fatal(err)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if !strings.Contains(string(status), "Uid:\t65532\t65532\t65532\t65532") {
		t.Errorf("not running as 65532:\n%s", status)
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	if _, err := os.Stat(root + "/usr/bin"); !os.IsNotExist(err) {
		t.Errorf("the host's /usr/bin is visible in the container: %v", err)
	}
	// The image's /tmp is writable by the container (its own writable layer)...
	if err := os.WriteFile(root+"/tmp/written", []byte("x"), 0o644); err != nil {
		t.Errorf("write /tmp in the container: %v", err)
	}
	// ...and the image store's copy is untouched.
	if matches, _ := filepath.Glob(filepath.Join(c.Dir, "kubelet", "*", "images", "sha256", "*", "rootfs", "tmp", "written")); len(matches) > 0 {
		t.Errorf("a container wrote into the image store: %v", matches)
	}
	// A restarted container starts from the image again: what the last run wrote is gone.
	c.Signal("default", "pulled", "main", syscall.SIGKILL)
	c.Eventually(time.Minute, "pulled restarted and Ready", func() (bool, error) {
		p := c.Pod("default", "pulled")
		return p.Status.ContainerStatuses[0].RestartCount == 1 && harness.IsReady(p), nil
	})
	if pid, err = c.PodPID("default", "pulled", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/tmp/written", pid)); !os.IsNotExist(err) {
		t.Errorf("the restarted container sees the previous run's /tmp/written: %v", err)
	}
	c.Eventually(30*time.Second, "asroot refused", func() (bool, error) {
		reason := c.JSONPath("default", "pod", "asroot", ".status.containerStatuses[0].state.waiting.reason")
		msg := c.JSONPath("default", "pod", "asroot", ".status.containerStatuses[0].state.waiting.message")
		return reason == "CreateContainerConfigError" && strings.Contains(msg, "runAsNonRoot and image will run as root"),
			fmt.Errorf("waiting %s: %s", reason, msg)
	})
	c.MustKubectl("delete", "pod", "pulled", "asroot", "--timeout=30s")
}
