package selftest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kaas/e2e/harness"
	"kaas/e2e/kubelet"
)

const lifecycleManifests = `
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: busybox, command: [sh, -c, "echo job ran"]}
---
apiVersion: v1
kind: Pod
metadata: {name: fails}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: busybox, command: [sh, -c, "exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: init}
spec:
  restartPolicy: OnFailure
  initContainers:
  - name: prepare
    image: busybox
    command: [sh, -c, "echo prepared-by-init > /work/state"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: main
    image: busybox
    command: [sh, -c, "cat /work/state"]
    volumeMounts: [{name: work, mountPath: /work}]
  volumes: [{name: work, emptyDir: {}}]
---
apiVersion: v1
kind: Pod
metadata: {name: noimage}
spec:
  containers:
  - {name: main, image: nosuch/image:1}
---
apiVersion: v1
kind: Pod
metadata: {name: unhealthy}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sleep, "3600"]
    livenessProbe:
      exec: {command: [sh, -c, "exit 1"]}
      periodSeconds: 1
      failureThreshold: 2
---
apiVersion: v1
kind: Secret
metadata: {name: rotating}
stringData: {tls.crt: "certificate one"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: static}
data: {settings: "never changes"}
---
apiVersion: v1
kind: Pod
metadata: {name: secret-reader}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    # The shell holds the first certificate open on fd 3 for as long as it runs.
    command: [sh, -c, "exec 3</etc/tls/tls.crt; while :; do sleep 1; done"]
    volumeMounts:
    - {name: static, mountPath: /etc/static}
    - {name: tls, mountPath: /etc/tls, readOnly: true}
  # static first: the kubelet resyncs volumes in this order (see checkSecretUpdate).
  volumes:
  - {name: static, configMap: {name: static}}
  - {name: tls, secret: {secretName: rotating, defaultMode: 0400}}
`

// TestPodLifecycle covers restartPolicy Never/OnFailure, a Job run by the real Job controller,
// init containers sharing an emptyDir, a restart by a failing exec liveness probe, and a Secret
// volume updated in place while its pod runs. Commands run from the host's PATH through the
// "host" image mapping.
func TestPodLifecycle(t *testing.T) {
	c := harness.Start(t, harness.Options{Images: map[string]string{"busybox*": "host"}})
	ctx := context.Background()
	c.Apply(lifecycleManifests)
	pods := c.Client.CoreV1().Pods("default")

	c.Eventually(60*time.Second, "job succeeded", func() (bool, error) {
		j, err := c.Client.BatchV1().Jobs("default").Get(ctx, "once", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return j.Status.Succeeded == 1, fmt.Errorf("job status %+v", j.Status)
	})
	c.Eventually(30*time.Second, "pod fails with exit 3", func() (bool, error) {
		p, err := pods.Get(ctx, "fails", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodFailed {
			return false, err
		}
		term := p.Status.ContainerStatuses[0].State.Terminated
		if term == nil || term.ExitCode != 3 || p.Status.ContainerStatuses[0].RestartCount != 0 {
			return false, fmt.Errorf("container status %+v", p.Status.ContainerStatuses[0])
		}
		return true, nil
	})
	c.Eventually(30*time.Second, "init pod succeeds", func() (bool, error) {
		p, err := pods.Get(ctx, "init", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodSucceeded, fmt.Errorf("phase %s", p.Status.Phase)
	})
	if logs := c.PodLogs("default", "init", "main"); !strings.Contains(logs, "prepared-by-init") {
		t.Errorf("main container did not see the init container's file:\n%s", logs)
	}
	c.Eventually(60*time.Second, "liveness restarts", func() (bool, error) {
		p, err := pods.Get(ctx, "unhealthy", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, err
		}
		return p.Status.ContainerStatuses[0].RestartCount >= 1, nil
	})
	c.Eventually(30*time.Second, "unknown image reported", func() (bool, error) {
		p, err := pods.Get(ctx, "noimage", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, err
		}
		cs := p.Status.ContainerStatuses[0]
		// Not in the image table: the kubelet tries to pull it (from docker.io, unreachable here).
		return cs.State.Waiting != nil && (cs.State.Waiting.Reason == "ErrImagePull" || cs.State.Waiting.Reason == "ImagePullBackOff") &&
				cs.RestartCount == 0,
			fmt.Errorf("status %+v", cs)
	})
	// Deleting a finished pod and a pod that never started: the kubelet removes both.
	c.MustKubectl("delete", "pod", "fails", "noimage", "--timeout=30s")
	t.Run("secret volume updated in place", func(t *testing.T) { checkSecretUpdate(t, c.For(t)) })
}

// checkSecretUpdate changes the Secret of pod secret-reader and checks, through the container's
// own view of its volumes (/proc/<pid>/root), what a real kubelet's atomic writer guarantees and
// what kaas brokers rely on to reload a renewed certificate: the new bytes appear within the
// kubelet's resync period, by a swap of the `..data` symlink, while the file the container holds
// open (fd 3) keeps the old bytes; and an unchanged object is never rewritten.
func checkSecretUpdate(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	c.WaitPodReady("default", "secret-reader", 60*time.Second)
	pid, err := c.PodPID("default", "secret-reader", "main")
	if err != nil {
		t.Fatal(err)
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	tls, static := root+"/etc/tls", root+"/etc/static"
	held := fmt.Sprintf("/proc/%d/fd/3", pid)
	read := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		return string(b), err
	}
	dataLink := func(vol string) string {
		t.Helper()
		st, err := os.Lstat(filepath.Join(vol, "..data"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s/..data is not a symlink: %v", vol, st.Mode())
		}
		target, err := os.Readlink(filepath.Join(vol, "..data"))
		if err != nil {
			t.Fatal(err)
		}
		return target
	}
	if got, err := read(filepath.Join(tls, "tls.crt")); err != nil || got != "certificate one" {
		t.Fatalf("tls.crt = %q (%v)", got, err)
	}
	if st, err := os.Stat(filepath.Join(tls, "tls.crt")); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o400 {
		t.Errorf("tls.crt: mode %v, want defaultMode 0400", st.Mode().Perm())
	}
	if link, err := os.Readlink(filepath.Join(tls, "tls.crt")); err != nil || link != "..data/tls.crt" {
		t.Errorf("tls.crt -> %q (%v), want ..data/tls.crt", link, err)
	}
	before, staticBefore := dataLink(tls), dataLink(static)

	secrets := c.Client.CoreV1().Secrets("default")
	s, err := secrets.Get(ctx, "rotating", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{"tls.crt": []byte("certificate two")}
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	// Within the resync period, plus slack for a busy machine.
	c.Eventually(kubelet.DefaultVolumeResync+10*time.Second, "the pod to see the new tls.crt", func() (bool, error) {
		got, err := read(filepath.Join(tls, "tls.crt"))
		return got == "certificate two", fmt.Errorf("tls.crt = %q (%v)", got, err)
	})
	t.Logf("the pod saw the new tls.crt %s after the update", time.Since(changed).Round(time.Millisecond))
	if after := dataLink(tls); after == before {
		t.Errorf("..data still points at %s", before)
	}
	if got, err := read(held); err != nil || got != "certificate one" {
		t.Errorf("the file held open since the start reads %q (%v), want the old bytes", got, err)
	}
	c.Eventually(5*time.Second, "the old version removed", func() (bool, error) {
		_, err := os.Lstat(filepath.Join(tls, before))
		return os.IsNotExist(err), err
	})
	// The kubelet's resync passes look at a pod's volumes in order, and static comes before tls:
	// the pass that swapped tls (at least one pass) found static unchanged and wrote nothing.
	if after := dataLink(static); after != staticBefore {
		t.Errorf("the unchanged ConfigMap's volume was rewritten: ..data %s -> %s", staticBefore, after)
	}
	if got, err := read(filepath.Join(static, "settings")); err != nil || got != "never changes" {
		t.Errorf("settings = %q (%v)", got, err)
	}
}

// TestNodes runs two nodes, spreads pods over them, gives the second node its own view of the
// shared volume (MapVolume, as the NFS scenarios will with one FUSE mount per host), and
// crashes that node's kubelet: the node lifecycle controller must mark it NotReady; after a
// restart of the kubelet the node is Ready again and its pod runs again.
func TestNodes(t *testing.T) {
	c := harness.Start(t, harness.Options{Nodes: 2, Images: map[string]string{"busybox*": "host"}})
	ctx := context.Background()
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(c.VolumeDir("shared"), "marker"), []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "marker"), []byte("mapped\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.MapVolume(c.Nodes[1], "shared", other)
	c.Apply(`
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: kaas-e2e-rwx
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread}
spec:
  replicas: 2
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      terminationGracePeriodSeconds: 1
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {labelSelector: {matchLabels: {app: spread}}, topologyKey: kubernetes.io/hostname}
      containers:
      - name: main
        image: busybox
        command: [sh, -c, "cat /data/marker; exec sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: shared}}]
`)
	c.Eventually(60*time.Second, "one ready pod per node", func() (bool, error) {
		list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, err
		}
		nodes := map[string]bool{}
		for _, p := range list.Items {
			if harness.IsReady(&p) {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(nodes) == 2, fmt.Errorf("ready on %v", nodes)
	})
	list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		want := map[string]string{c.Nodes[0]: "plain", c.Nodes[1]: "mapped"}[p.Spec.NodeName]
		if logs := c.PodLogs("default", p.Name, "main"); !strings.Contains(logs, "\n"+want+"\n") {
			t.Errorf("pod %s on %s should print %q:\n%s", p.Name, p.Spec.NodeName, want, logs)
		}
	}
	// The node lifecycle controller marks a lost node's pods NotReady with its own status write,
	// which may land after the kubelet's: the kubelet must put its status back, as the real one's
	// status manager does, and must not rewrite an unchanged status (no resourceVersion churn).
	marked := list.Items[0].Name
	markNotReady(t, c, marked)
	c.Eventually(30*time.Second, marked+" Ready again after another writer marked it NotReady", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, marked, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return harness.IsReady(p), fmt.Errorf("conditions %+v", p.Status.Conditions)
	})
	settled, err := c.Client.CoreV1().Pods("default").Get(ctx, marked, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if now, err := c.Client.CoreV1().Pods("default").Get(ctx, marked, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if now.ResourceVersion != settled.ResourceVersion {
		t.Errorf("pod %s rewritten with nothing changed: resourceVersion %s -> %s", marked, settled.ResourceVersion, now.ResourceVersion)
	}
	c.KillKubelet(c.Nodes[1])
	c.Eventually(60*time.Second, c.Nodes[1]+" NotReady", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.Nodes[1], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status != corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	var victim string
	for _, p := range list.Items {
		if p.Spec.NodeName == c.Nodes[1] {
			victim = p.Name
		}
	}
	c.RestartKubelet(c.Nodes[1])
	c.Eventually(60*time.Second, victim+" running again after the node came back", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return harness.IsReady(p) && p.Status.ContainerStatuses[0].RestartCount >= 1,
			fmt.Errorf("ready=%v status=%+v", harness.IsReady(p), p.Status.ContainerStatuses)
	})
}

// markNotReady sets a pod's Ready condition to False the way the node lifecycle controller does.
func markNotReady(t *testing.T, c *harness.Cluster, name string) {
	t.Helper()
	ctx := context.Background()
	pods := c.Client.CoreV1().Pods("default")
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
				p.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
}
