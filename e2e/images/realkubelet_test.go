package images

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kaas/e2e/harness"
	"kaas/e2e/imagebuild"
	"kaas/e2e/kaastest"
)

// TestRealKubelet is the harness' real-kubelet leg: a kubelet built from the pinned Kubernetes
// module, with Debian's containerd, runc and CNI plugins, joins the harness cluster as one more
// node; the broker image is pulled through containerd from the harness registry (a ghcr.io
// mirror) and runs there in local mode under the restricted pod security settings, a client
// produces and consumes through it, and a missing image fails as the kubelet reports it.
func TestRealKubelet(t *testing.T) {
	if !harness.InNetns() {
		t.Skip("the real kubelet runs in the harness' network namespace (KAAS_E2E_NETNS=0 or not root)")
	}
	start := time.Now()
	before := readSysctls(t)
	c := harness.Start(t, kaastest.Pulled(t, harness.Options{Volumes: []string{}, IngressClasses: []string{}}))
	broker, _ := kaastest.Images(t)
	// 10.<k>.0.1 is the apiserver; the harness' nodes use 10.<k>.1-99.x.
	subnet := strings.TrimSuffix(c.APIServerHost, ".0.1")
	const node = "kaas-e2e-containerd"
	// The apiserver's identity towards kubelets may use their API (logs, exec), as kubeadm
	// grants it; a real kubelet asks the apiserver (webhook authorization), the process
	// kubelet does not.
	c.Apply(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-apiserver-kubelet-client}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:kubelet-api-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: kube-apiserver-kubelet-client}]
`)
	n := startRealNode(t, c, node, subnet+".250.1", subnet+".251.0/24", []string{"ghcr.io"})

	t.Run("the node is Ready with containerd", func(t *testing.T) {
		c := c.For(t)
		n.eventually(t, c, 2*time.Minute, "node "+node+" Ready", func() (bool, error) {
			got := c.JSONPath("", "node", node, `.status.conditions[?(@.type=="Ready")].status`)
			return got == "True", fmt.Errorf("Ready=%q", got)
		})
		runtime := c.JSONPath("", "node", node, ".status.nodeInfo.containerRuntimeVersion")
		if !strings.HasPrefix(runtime, "containerd://1.") {
			t.Errorf("containerRuntimeVersion %q, want containerd://1.x", runtime)
		}
		version := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(c.KubectlBinary()))), "k8s-")
		if got := c.JSONPath("", "node", node, ".status.nodeInfo.kubeletVersion"); got != version {
			t.Errorf("kubeletVersion %q, want %q", got, version)
		}
		if got := c.JSONPath("", "node", node, ".status.addresses[?(@.type==\"InternalIP\")].address"); got != n.ip {
			t.Errorf("InternalIP %q, want %q", got, n.ip)
		}
		t.Logf("node %s Ready (%s) %s after the start", node, runtime, time.Since(start).Round(time.Second))
	})

	t.Run("the broker image runs restricted on the real kubelet", func(t *testing.T) {
		c := c.For(t)
		c.Apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: broker, namespace: default}
spec:
  nodeName: %s
  securityContext:
    runAsNonRoot: true
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: kaas
    image: ghcr.io/kaas/kaas:0.1.0
    env:
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - {name: KAAS_LISTEN, value: "0.0.0.0:9092"}
    - {name: KAAS_ADVERTISE, value: "$(POD_IP):9092"}
    - {name: KAAS_DATA_DIR, value: /data}
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
    resources:
      requests: {cpu: 50m, memory: 64Mi}
      limits: {memory: 256Mi}
    readinessProbe:
      tcpSocket: {port: 9092}
      periodSeconds: 1
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, emptyDir: {}}]
`, node))
		n.eventually(t, c, 3*time.Minute, "pod broker Ready", func() (bool, error) {
			ready, err := c.PodReady("default", "broker")
			if err != nil || ready {
				return ready, err
			}
			return false, fmt.Errorf("not Ready: %s", c.JSONPath("default", "pod", "broker", ".status.containerStatuses[0].state"))
		})
		t.Logf("pod broker Ready %s after the start", time.Since(start).Round(time.Second))

		imgs, err := imagebuild.ReadLayout(broker)
		if err != nil {
			t.Fatal(err)
		}
		var digest string
		for _, im := range imgs {
			if im.Tag == "0.1.0" {
				d, err := im.Image.Digest()
				if err != nil {
					t.Fatal(err)
				}
				digest = d.String()
			}
		}
		if got, want := c.JSONPath("default", "pod", "broker", ".status.containerStatuses[0].imageID"), "ghcr.io/kaas/kaas@"+digest; got != want {
			t.Errorf("imageID %q, want the pushed image %q", got, want)
		}

		// The container's process, found through its cgroup (cgroupfs driver, under the
		// kubelet's cgroup root): its memory limit, seccomp filter and no_new_privs, and what
		// checkProcess checks (nonroot, the image's root, read-only).
		id := strings.TrimPrefix(c.JSONPath("default", "pod", "broker", ".status.containerStatuses[0].containerID"), "containerd://")
		uid := c.JSONPath("default", "pod", "broker", ".metadata.uid")
		cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/memory", n.cgroup, "kubepods*", "*", "pod"+uid, id))
		if len(cgs) != 1 || id == "" {
			t.Fatalf("memory cgroup of container %q of pod %s: %v", id, uid, cgs)
		}
		if b, err := os.ReadFile(filepath.Join(cgs[0], "memory.limit_in_bytes")); err != nil || strings.TrimSpace(string(b)) != "268435456" {
			t.Errorf("memory.limit_in_bytes %q (%v), want 268435456 (256Mi)", b, err)
		}
		procs, err := os.ReadFile(filepath.Join(cgs[0], "cgroup.procs"))
		if err != nil || len(strings.Fields(string(procs))) == 0 {
			t.Fatalf("no process in %s: %v", cgs[0], err)
		}
		var pid int
		fmt.Sscan(strings.Fields(string(procs))[0], &pid)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1", "CapEff:\t0000000000000000"} {
			if !strings.Contains(string(status), want+"\n") {
				t.Errorf("container process %d: no %q in its status", pid, want)
			}
		}
		checkProcess(t, "broker", pid, "/kaas")
		// The service account token, a tmpfs the kubelet mounts in its own mount namespace,
		// reached the container through the shared root dir.
		root := fmt.Sprintf("/proc/%d/root", pid)
		if tok, err := os.ReadFile(root + "/var/run/secrets/kubernetes.io/serviceaccount/token"); err != nil || len(tok) == 0 {
			t.Errorf("the service account token in the container: %d bytes, %v", len(tok), err)
		}
	})

	t.Run("produce and consume through the pod", func(t *testing.T) {
		c := c.For(t)
		ip := c.JSONPath("default", "pod", "broker", ".status.podIP")
		if !strings.HasPrefix(ip, subnet+".251.") {
			t.Fatalf("pod IP %q, want one of the CNI bridge's %s", ip, n.podCIDR)
		}
		bootstrap := ip + ":9092"
		var want []string
		for i := 0; i < 100; i++ {
			want = append(want, fmt.Sprintf("record-%03d", i))
		}
		c.Eventually(time.Minute, "produce with acks=all", func() (bool, error) {
			cmd := exec.Command("kcat", "-b", bootstrap, "-t", "real", "-P", "-X", "acks=all", "-X", "message.timeout.ms=20000")
			cmd.Stdin = strings.NewReader(strings.Join(want, "\n") + "\n")
			out, err := cmd.CombinedOutput()
			return err == nil, fmt.Errorf("kcat -P: %v: %s", err, out)
		})
		c.Eventually(time.Minute, "consume everything back in order", func() (bool, error) {
			out, err := exec.Command("kcat", "-b", bootstrap, "-t", "real", "-C", "-e", "-o", "beginning", "-q", "-f", "%s\n").CombinedOutput()
			if err != nil {
				return false, fmt.Errorf("kcat -C: %v: %s", err, out)
			}
			got := strings.Fields(string(out))
			return strings.Join(got, " ") == strings.Join(want, " "), fmt.Errorf("read %d records, want %d", len(got), len(want))
		})
		logs := c.MustKubectl("logs", "-n", "default", "broker")
		if !strings.Contains(logs, "INFO") || !strings.Contains(logs, "group shard taken over") {
			t.Errorf("kubectl logs broker: no broker log lines:\n%s", lastLines(logs, 20))
		}
		// The broker's data went to its emptyDir, a directory under the kubelet's root.
		uid := c.JSONPath("default", "pod", "broker", ".metadata.uid")
		if ents, err := os.ReadDir(filepath.Join(n.dir, "kubelet", "pods", uid, "volumes", "kubernetes.io~empty-dir", "data")); err != nil || len(ents) == 0 {
			t.Errorf("the broker's emptyDir data dir: %d entries, %v", len(ents), err)
		}
		// containerd wrote the logs where the kubelet's podLogsDir says, not to /var/log/pods.
		if b, err := os.ReadFile(filepath.Join(n.dir, "pod-logs", "default_broker_"+uid, "kaas", "0.log")); err != nil || !strings.Contains(string(b), "group shard taken over") {
			t.Errorf("the container log in the node's pod log directory: %v", err)
		}
	})

	t.Run("a missing image fails as the kubelet reports it", func(t *testing.T) {
		c := c.For(t)
		c.Apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: missing, namespace: default}
spec:
  nodeName: %s
  containers: [{name: c, image: "ghcr.io/kaas/kaas:0.0.0-missing"}]
`, node))
		for _, tc := range []struct{ reason, message string }{
			{"ErrImagePull", `failed to pull and unpack image "ghcr.io/kaas/kaas:0.0.0-missing"`},
			{"ImagePullBackOff", `Back-off pulling image "ghcr.io/kaas/kaas:0.0.0-missing"`},
		} {
			n.eventually(t, c, 2*time.Minute, "missing waiting with "+tc.reason, func() (bool, error) {
				reason := c.JSONPath("default", "pod", "missing", ".status.containerStatuses[0].state.waiting.reason")
				msg := c.JSONPath("default", "pod", "missing", ".status.containerStatuses[0].state.waiting.message")
				return reason == tc.reason && strings.Contains(msg, tc.message), fmt.Errorf("waiting %s: %s", reason, msg)
			})
		}
	})

	t.Run("no global sysctl changed", func(t *testing.T) {
		if after := readSysctls(t); after != before {
			t.Errorf("sysctls changed:\nbefore %s\nafter  %s", before, after)
		}
	})
	t.Logf("real-kubelet leg done %s after the start", time.Since(start).Round(time.Second))
}

// readSysctls reads the global sysctls the kubelet would set, as this mount namespace sees them
// (the machine's: the kubelet's namespace covers them).
func readSysctls(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, s := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s=%s ", s, strings.TrimSpace(string(v)))
	}
	return b.String()
}
