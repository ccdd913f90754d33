package selftest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kaas/e2e/harness"
)

const webManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: selftest}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config, namespace: selftest}
data: {greeting: "hello from a configMap"}
---
apiVersion: v1
kind: Secret
metadata: {name: web-secret, namespace: selftest}
stringData: {password: "s3cret"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared, namespace: selftest}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: kaas-e2e-rwx
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: selftest}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: selftest}
spec:
  replicas: 3
  serviceName: web
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: web
        image: kaas-e2e/testpod:v1
        command: [/testpod]
        args: ["--listen=$(POD_IP):8080", "--show=/etc/config,/etc/secret,/data,/var/run/secrets/kubernetes.io/serviceaccount,/etc/hosts", "--api-check", "--drain=1s"]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
        - {name: GREETING, valueFrom: {configMapKeyRef: {name: web-config, key: greeting}}}
        - {name: SELF, value: "$(POD_NAME).web.$(POD_NAMESPACE)"}
        ports: [{name: http, containerPort: 8080}]
        startupProbe:
          exec: {command: [cat, /etc/config/greeting]}
          periodSeconds: 1
        readinessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 1
          failureThreshold: 2
        livenessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 2
        volumeMounts:
        - {name: config, mountPath: /etc/config}
        - {name: secret, mountPath: /etc/secret, readOnly: true}
        - {name: data, mountPath: /data}
        - {name: scratch, mountPath: /scratch}
      volumes:
      - {name: config, configMap: {name: web-config}}
      - {name: secret, secret: {secretName: web-secret}}
      - {name: data, persistentVolumeClaim: {claimName: shared}}
      - {name: scratch, emptyDir: {}}
`

// TestStatefulSet runs three replicas of the harness' testpod and checks the lifecycle a kaas
// broker StatefulSet relies on: scheduling, start with env/volumes/token, readiness,
// EndpointSlices, restart after kill -9, readiness loss under SIGSTOP, drain on delete.
func TestStatefulSet(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := context.Background()
	const ns = "selftest"
	// Put a file on the RWX volume before the pods start: every pod must see it at /data.
	if err := os.WriteFile(filepath.Join(c.VolumeDir("shared"), "hello.txt"), []byte("shared!"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Apply(webManifests)
	c.Eventually(90*time.Second, "3 ready replicas", func() (bool, error) {
		sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return sts.Status.ReadyReplicas == 3, fmt.Errorf("readyReplicas=%d", sts.Status.ReadyReplicas)
	})
	t.Log(c.MustKubectl("get", "pods", "-n", ns, "-o", "wide"))

	ips := map[string]string{}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("web-%d", i)
		p := c.Pod(ns, name)
		checkPodStatus(t, p)
		ips[p.Status.PodIP] = name
		// The pod serves on its own address, reachable from the test.
		body := httpGet(t, "http://"+c.PodAddr(ns, name, 8080)+"/whoami")
		if strings.TrimSpace(body) != name {
			t.Errorf("%s /whoami = %q", name, body)
		}
		logs := c.PodLogs(ns, name, "web")
		for _, want := range []string{
			"env: POD_NAME=" + name,
			"env: POD_NAMESPACE=" + ns,
			"env: POD_IP=" + p.Status.PodIP,
			"env: NODE_NAME=" + p.Spec.NodeName,
			"env: GREETING=hello from a configMap",
			"env: SELF=" + name + ".web." + ns,
			fmt.Sprintf("env: KUBERNETES_SERVICE_HOST=%s", c.APIServerHost),
			fmt.Sprintf("env: KUBERNETES_SERVICE_PORT=%d", c.APIServerPort),
			"hostname: " + name,
			`file: /etc/config/greeting: "hello from a configMap"`,
			`file: /etc/secret/password: "s3cret"`,
			`file: /data/hello.txt: "shared!"`,
			`file: /var/run/secrets/kubernetes.io/serviceaccount/namespace: "selftest"`,
			"file: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt: \"-----BEGIN CERTIFICATE",
			"file: /var/run/secrets/kubernetes.io/serviceaccount/token: \"ey",
			"api-check: user=system:serviceaccount:selftest:default",
			// The kubelet-managed /etc/hosts: own FQDN from hostname + subdomain (serviceName).
			p.Status.PodIP + `\t` + name + ".web." + ns + ".svc.cluster.local " + name,
		} {
			if !strings.Contains(logs, want) {
				t.Errorf("%s log lacks %q:\n%s", name, want, logs)
			}
		}
	}
	if len(ips) != 3 {
		t.Fatalf("pods share addresses: %v", ips)
	}

	// The EndpointSlice controller publishes all three addresses as ready.
	c.Eventually(30*time.Second, "3 ready endpoints", func() (bool, error) {
		ready, _ := endpoints(ctx, c, ns, "web")
		return len(ready) == 3 && ips[ready[0]] != "" && ips[ready[1]] != "" && ips[ready[2]] != "",
			fmt.Errorf("ready endpoints %v, pods %v", ready, ips)
	})

	t.Run("kill -9 restarts the container", func(t *testing.T) {
		c := c.For(t)
		before := c.Pod(ns, "web-1")
		oldPID, _ := c.PodPID(ns, "web-1", "web")
		c.Signal(ns, "web-1", "web", syscall.SIGKILL)
		c.Eventually(60*time.Second, "web-1 restarted and Ready", func() (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			cs := p.Status.ContainerStatuses[0]
			return cs.RestartCount == before.Status.ContainerStatuses[0].RestartCount+1 && harness.IsReady(p),
				fmt.Errorf("restartCount=%d ready=%v", cs.RestartCount, harness.IsReady(p))
		})
		p := c.Pod(ns, "web-1")
		cs := p.Status.ContainerStatuses[0]
		if p.UID != before.UID {
			t.Errorf("the pod was replaced, want the container restarted in place")
		}
		if term := cs.LastTerminationState.Terminated; term == nil || term.ExitCode != 137 || term.Signal != 9 {
			t.Errorf("lastState.terminated = %+v, want exit 137 by signal 9", term)
		}
		if newPID, _ := c.PodPID(ns, "web-1", "web"); newPID == oldPID {
			t.Errorf("pid unchanged after restart: %d", newPID)
		}
		// kubectl logs goes through the apiserver to the process kubelet.
		cur := c.MustKubectl("logs", "-n", ns, "web-1")
		prev := c.MustKubectl("logs", "-n", ns, "web-1", "--previous")
		for _, out := range []string{cur, prev} {
			if !strings.Contains(out, "env: POD_NAME=web-1") || strings.Count(out, "serving on") != 1 {
				t.Errorf("kubectl logs (current or previous) shows not exactly one run:\n%s", out)
			}
		}
		if cur == prev {
			t.Errorf("kubectl logs --previous shows the current run")
		}
	})

	t.Run("SIGSTOP makes the pod unready, SIGCONT ready again", func(t *testing.T) {
		c := c.For(t)
		ip := c.Pod(ns, "web-2").Status.PodIP
		c.Signal(ns, "web-2", "web", syscall.SIGSTOP)
		c.Eventually(30*time.Second, "web-2 NotReady and out of the ready endpoints", func() (bool, error) {
			ready, _ := endpoints(ctx, c, ns, "web")
			r, err := c.PodReady(ns, "web-2")
			return !r && !contains(ready, ip), err
		})
		c.Signal(ns, "web-2", "web", syscall.SIGCONT)
		c.WaitPodReady(ns, "web-2", 30*time.Second)
		if n := c.Pod(ns, "web-2").Status.ContainerStatuses[0].RestartCount; n != 0 {
			t.Errorf("a stopped container was restarted (%d); liveness is TCP and must pass", n)
		}
	})

	t.Run("kubectl delete pod drains with SIGTERM", func(t *testing.T) {
		c := c.For(t)
		old := c.Pod(ns, "web-0")
		start := time.Now()
		// kubectl waits until the kubelet has stopped the process and removed the object.
		c.MustKubectl("delete", "pod", "-n", ns, "web-0", "--timeout=60s")
		t.Logf("delete took %s", time.Since(start))
		c.Eventually(60*time.Second, "web-0 recreated and Ready", func() (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return p.UID != old.UID && harness.IsReady(p), nil
		})
		logs := c.PodLogs(ns, "web-0", "web")
		for _, want := range []string{"got SIGTERM, draining", "exiting after SIGTERM", "exited: exit status 0"} {
			if !strings.Contains(logs, want) {
				t.Errorf("web-0 log lacks %q:\n%s", want, logs)
			}
		}
	})
}

// checkPodStatus checks what the process kubelet reports for a running, ready pod.
func checkPodStatus(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("%s phase %s", p.Name, p.Status.Phase)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		ok := false
		for _, cond := range p.Status.Conditions {
			ok = ok || (cond.Type == ct && cond.Status == corev1.ConditionTrue)
		}
		if !ok {
			t.Errorf("%s lacks condition %s=True: %+v", p.Name, ct, p.Status.Conditions)
		}
	}
	cs := p.Status.ContainerStatuses
	if len(cs) != 1 || !cs[0].Ready || cs[0].State.Running == nil || !strings.HasPrefix(cs[0].ContainerID, "process://") {
		t.Errorf("%s container status %+v", p.Name, cs)
	}
}

// endpoints lists the ready addresses of a service's EndpointSlices.
func endpoints(ctx context.Context, c *harness.Cluster, ns, svc string) ([]string, error) {
	slices, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	var ready []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready = append(ready, e.Addresses...)
			}
		}
	}
	return ready, nil
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
