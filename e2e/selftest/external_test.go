package selftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kaas/e2e/harness"
)

// externalManifests: one web pod behind a NodePort Service, a LoadBalancer Service that takes
// the pool's next address and one that asks for an address (%[1]s) on another port.
const externalManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: external}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: external}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: kaas-e2e/testpod:v1
        command: [/testpod]
        args: ["--listen=:8080"]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: web-np, namespace: external}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-lb, namespace: external}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-lb-fixed, namespace: external}
spec:
  type: LoadBalancer
  loadBalancerIP: %[1]s
  selector: {app: web}
  ports: [{name: http, port: 81, targetPort: 8080}]
`

// TestExternalAccess reaches Services from outside the cluster, from the harness' laptop (a
// network namespace with routes to the nodes and the load-balancer pool only): NodePort on every
// node's address, LoadBalancer addresses from the pool (spec.loadBalancerIP honoured, an address
// in use refused, freed when its Service is deleted or changes type), a node that leaves and
// comes back; and not the pod IPs, cluster IPs, cluster DNS or apiserver, which the test
// process reaches.
func TestExternalAccess(t *testing.T) {
	if !harness.InNetns() {
		t.Skip("no service proxy outside the harness' network namespace")
	}
	c := harness.Start(t, harness.Options{Nodes: 2})
	ctx := context.Background()
	const ns = "external"
	pool := netip.MustParsePrefix(c.LoadBalancerPool)
	fixedIP := nthAddr(pool, 200)
	c.Apply(fmt.Sprintf(externalManifests, fixedIP))
	pod := readyPod(c, ns, "app=web", 90*time.Second)
	laptop, err := c.Laptop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("laptop %s, load-balancer pool %s, web pod %s (%s) on %s", laptop.IP, pool, pod.Name, pod.Status.PodIP, pod.Spec.NodeName)
	np, err := c.Client.CoreV1().Services(ns).Get(ctx, "web-np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := strconv.Itoa(int(np.Spec.Ports[0].NodePort))

	// NodePort: every node's address, the pod's node or not.
	for _, node := range c.Nodes {
		expectWhoami(c, laptop, net.JoinHostPort(c.NodeIP(node), nodePort), pod.Name)
	}

	// LoadBalancer: the pool's first address, and its node port too.
	lbIP := c.LoadBalancerIP(ns, "web-lb", 30*time.Second)
	if a, err := netip.ParseAddr(lbIP); err != nil || !pool.Contains(a) {
		t.Errorf("web-lb: load-balancer address %q, not in the pool %s", lbIP, pool)
	}
	expectWhoami(c, laptop, net.JoinHostPort(lbIP, "80"), pod.Name)
	lb, err := c.Client.CoreV1().Services(ns).Get(ctx, "web-lb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectWhoami(c, laptop, net.JoinHostPort(c.NodeIP(c.Nodes[0]), strconv.Itoa(int(lb.Spec.Ports[0].NodePort))), pod.Name)
	if got := c.LoadBalancerIP(ns, "web-lb-fixed", 30*time.Second); got != fixedIP {
		t.Errorf("web-lb-fixed: load-balancer address %s, want its spec.loadBalancerIP %s", got, fixedIP)
	}
	expectWhoami(c, laptop, net.JoinHostPort(fixedIP, "81"), pod.Name)

	// A program on the laptop (curl) gets there too, and resolves no cluster name.
	out, err := laptop.Command("curl", "-sS", "--max-time", "10", "http://"+net.JoinHostPort(lbIP, "80")+"/whoami").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != pod.Name {
		t.Errorf("curl on the laptop: %v: %q, want %q", err, out, pod.Name)
	}
	if out, err := laptop.Command("getent", "hosts", "web-lb.external.svc.cluster.local").CombinedOutput(); err == nil {
		t.Errorf("the laptop resolved web-lb.external.svc.cluster.local: %q", out)
	}
	if out, err := laptop.Command("cat", "/etc/resolv.conf").CombinedOutput(); err != nil || strings.Contains(string(out), c.DNS) ||
		strings.Contains(string(out), harness.ClusterDomain) {
		t.Errorf("the laptop's resolv.conf: %v: %q", err, out)
	}
	if out, err := laptop.Command("getent", "hosts", "laptop").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), laptop.IP+" ") {
		t.Errorf("getent hosts laptop on the laptop: %v: %q, want its address %s", err, out, laptop.IP)
	}
	pwd := laptop.Command("pwd")
	pwd.Dir = c.Dir
	if out, err := pwd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != c.Dir {
		t.Errorf("pwd on the laptop in %s: %v: %q", c.Dir, err, out)
	}

	// Inside the cluster only: reachable from the test process, not from the laptop.
	inside := map[string]string{
		"pod IP":      net.JoinHostPort(pod.Status.PodIP, "8080"),
		"cluster IP":  net.JoinHostPort(lb.Spec.ClusterIP, "80"),
		"cluster DNS": net.JoinHostPort(c.DNS, "53"),
		"apiserver":   net.JoinHostPort(c.APIServerHost, strconv.Itoa(c.APIServerPort)),
	}
	for what, addr := range inside {
		if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			t.Errorf("the %s %s from the test process: %v", what, addr, err)
		} else {
			conn.Close()
		}
		// No route: the laptop's router knows only the nodes and the load balancers.
		if err := laptopDial(laptop, addr); !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("the %s %s from the laptop: %v, want %v", what, addr, err, syscall.ENETUNREACH)
		}
	}

	// An address in use is refused to a Service that asks for it (an AllocationFailed Event
	// says so) until its Service is deleted, which frees its listener too.
	c.Apply(fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: web-lb-wait, namespace: external}
spec:
  type: LoadBalancer
  loadBalancerIP: %s
  selector: {app: web}
  ports: [{name: http, port: 8081, targetPort: 8080}]
`, lbIP))
	c.Eventually(30*time.Second, "an AllocationFailed Event on web-lb-wait", func() (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web-lb-wait"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "AllocationFailed" && strings.Contains(e.Message, "in use by external/web-lb") {
				return true, nil
			}
		}
		return false, fmt.Errorf("events %v", evs.Items)
	})
	if c.JSONPath(ns, "service", "web-lb-wait", ".status.loadBalancer.ingress") != "" {
		t.Errorf("web-lb-wait got an address in use: %s", c.JSONPath(ns, "service", "web-lb-wait", ".status.loadBalancer.ingress"))
	}
	c.MustKubectl("-n", ns, "delete", "service", "web-lb")
	expectRefused(c, laptop, net.JoinHostPort(lbIP, "80"))
	if got := c.LoadBalancerIP(ns, "web-lb-wait", 30*time.Second); got != lbIP {
		t.Errorf("web-lb-wait: load-balancer address %s, want the freed %s", got, lbIP)
	}
	expectWhoami(c, laptop, net.JoinHostPort(lbIP, "8081"), pod.Name)

	// Another type: the address is released (the apiserver clears the status) and not served.
	c.MustKubectl("-n", ns, "patch", "service", "web-lb-fixed", "-p", `{"spec":{"type":"ClusterIP"}}`)
	expectRefused(c, laptop, net.JoinHostPort(fixedIP, "81"))
	if got := c.JSONPath(ns, "service", "web-lb-fixed", ".status.loadBalancer.ingress"); got != "" {
		t.Errorf("web-lb-fixed as ClusterIP: status.loadBalancer.ingress %s", got)
	}

	// A node that goes away stops serving node ports; registered again, it serves them again.
	spare := c.Nodes[0]
	if spare == pod.Spec.NodeName {
		spare = c.Nodes[1]
	}
	spareAddr := net.JoinHostPort(c.NodeIP(spare), nodePort)
	c.KillKubelet(spare)
	if err := c.Client.CoreV1().Nodes().Delete(ctx, spare, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectRefused(c, laptop, spareAddr)
	c.RestartKubelet(spare)
	expectWhoami(c, laptop, spareAddr, pod.Name)
}

// nthAddr is the n-th address of pool.
func nthAddr(pool netip.Prefix, n int) string {
	a := pool.Masked().Addr()
	for i := 0; i < n; i++ {
		a = a.Next()
	}
	return a.String()
}

// readyPod waits for a Ready pod matching selector in ns and returns it.
func readyPod(c *harness.Cluster, ns, selector string, timeout time.Duration) *corev1.Pod {
	var pod *corev1.Pod
	c.Eventually(timeout, "a Ready pod "+selector+" in "+ns, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if harness.IsReady(&pods.Items[i]) {
				pod = &pods.Items[i]
				return true, nil
			}
		}
		return false, fmt.Errorf("%d pods, none Ready", len(pods.Items))
	})
	return pod
}

// expectWhoami waits until GET http://addr/whoami from the laptop answers want (a listener may
// open a moment after the object that asks for it is written).
func expectWhoami(c *harness.Cluster, laptop *harness.Laptop, addr, want string) {
	client := &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: laptop.DialContext, DisableKeepAlives: true}}
	c.Eventually(30*time.Second, "GET http://"+addr+"/whoami from the laptop", func() (bool, error) {
		resp, err := client.Get("http://" + addr + "/whoami")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return err == nil && strings.TrimSpace(string(body)) == want, fmt.Errorf("got %q (%v)", body, err)
	})
}

// expectRefused waits until the laptop's connections to addr are refused: the address is still
// routed, but nothing listens any more.
func expectRefused(c *harness.Cluster, laptop *harness.Laptop, addr string) {
	c.Eventually(30*time.Second, addr+" refused to the laptop", func() (bool, error) {
		err := laptopDial(laptop, addr)
		return errors.Is(err, syscall.ECONNREFUSED), fmt.Errorf("dial: %v", err)
	})
}

// laptopDial connects from the laptop to addr and closes the connection.
func laptopDial(laptop *harness.Laptop, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := laptop.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
	}
	return err
}
