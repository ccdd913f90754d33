package selftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kaas/e2e/harness"
)

const dnsManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: dnstest}
---
# The StatefulSet's governing Service publishes not-ready pods, as kaas's brokers Service does.
apiVersion: v1
kind: Service
metadata: {name: web, namespace: dnstest}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: ready, namespace: dnstest}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: front, namespace: dnstest}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: dnstest}
spec:
  replicas: 1
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: kaas-e2e/testpod:v1
        command: [/testpod]
        # Every address of its own network namespace: localhost too, which port-forward dials.
        args: ["--listen=:8080"]
        env:
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
          failureThreshold: 1
`

// lookups are what the client pods resolve with glibc (getent, from the host's PATH): the short
// names only resolve through the pod's search path.
const lookups = `cat /etc/resolv.conf; for n in web-0 web-0.web front front.dnstest web-0.web.dnstest.svc.cluster.local kubernetes.default nosuch; do echo "lookup $n: $(getent hosts $n || echo FAILED)"; done; echo "front says: $(curl -sS --max-time 10 http://front/whoami)"`

// TestServiceDiscovery checks the cluster DNS with real resolvers: a StatefulSet pod's name behind
// its headless Service (also while not ready: publishNotReadyAddresses), a headless Service's
// ready endpoints, a ClusterIP Service, NXDOMAIN, a refusal outside the cluster domain, pods'
// search paths (glibc in a pod, dnsPolicy ClusterFirst/Default/None), and the test process's own
// resolver and its children's, which resolve the names brokers advertise. And Service IPs: a
// ClusterIP Service (port → targetPort) from the test and from a pod, the apiserver's
// `kubernetes` Service.
func TestServiceDiscovery(t *testing.T) {
	if !harness.InNetns() {
		t.Skip("no cluster DNS outside the harness' network namespace")
	}
	c := harness.Start(t, harness.Options{Images: map[string]string{"busybox*": "host"}})
	ctx := context.Background()
	const ns = "dnstest"
	c.Apply(dnsManifests)
	pod := c.WaitPodReady(ns, "web-0", 90*time.Second)
	front, err := c.Client.CoreV1().Services(ns).Get(ctx, "front", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podIP, frontIP := pod.Status.PodIP, front.Spec.ClusterIP

	// Go's resolver asking the cluster's server, fully qualified names.
	r := c.Resolver()
	expect := func(r *net.Resolver, name, want string) {
		t.Helper()
		c.Eventually(30*time.Second, name+" → "+want, func() (bool, error) {
			addrs, err := r.LookupHost(ctx, name)
			if err != nil {
				return false, err
			}
			return len(addrs) == 1 && addrs[0] == want, fmt.Errorf("got %v", addrs)
		})
	}
	expect(r, "web-0.web.dnstest.svc.cluster.local", podIP)
	expect(r, "web.dnstest.svc.cluster.local", podIP)
	expect(r, "ready.dnstest.svc.cluster.local", podIP)
	expect(r, "front.dnstest.svc.cluster.local", frontIP)
	expect(r, strings.ReplaceAll(podIP, ".", "-")+".dnstest.pod.cluster.local", podIP)
	// The test process' default resolver, through its resolv.conf's search path: the names
	// brokers advertise with listener.advertise PodDns.
	expect(net.DefaultResolver, "web-0.web.dnstest.svc", podIP)
	expect(net.DefaultResolver, "front.dnstest.svc", frontIP)
	_, err = r.LookupHost(ctx, "nosuch.dnstest.svc.cluster.local")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("nosuch.dnstest.svc.cluster.local: %v, want not found", err)
	}
	// Rcodes, asked on the wire.
	for name, want := range map[string]int{
		"nosuch.dnstest.svc.cluster.local.":    dns.RcodeNameError,
		"web-1.web.dnstest.svc.cluster.local.": dns.RcodeNameError,
		"front.dnstest.svc.cluster.local.":     dns.RcodeSuccess,
		"example.org.":                         dns.RcodeRefused,
	} {
		m := new(dns.Msg).SetQuestion(name, dns.TypeA)
		in, err := dns.Exchange(m, net.JoinHostPort(c.DNS, "53"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if in.Rcode != want {
			t.Errorf("%s: rcode %s, want %s", name, dns.RcodeToString[in.Rcode], dns.RcodeToString[want])
		}
	}
	// A program the test runs (glibc's resolver, as the Rust and Java clients use) resolves the
	// advertised names too.
	out, err := exec.Command("getent", "hosts", "web-0.web.dnstest.svc").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), podIP+" ") {
		t.Errorf("getent hosts web-0.web.dnstest.svc in the test process: %v: %q", err, out)
	}

	// Pods: glibc through the pod's resolv.conf.
	c.Apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: dnstest}
spec:
  restartPolicy: Never
  containers: [{name: main, image: busybox, command: [sh, -c, %[1]q]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client-default, namespace: dnstest}
spec:
  restartPolicy: Never
  dnsPolicy: Default
  containers: [{name: main, image: busybox, command: [sh, -c, "cat /etc/resolv.conf"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client-none, namespace: dnstest}
spec:
  restartPolicy: Never
  dnsPolicy: None
  dnsConfig:
    nameservers: [%[2]s]
    searches: [web.dnstest.svc.cluster.local]
    options: [{name: ndots, value: "2"}, {name: edns0}]
  containers: [{name: main, image: busybox, command: [sh, -c, %[1]q]}]
`, lookups, c.DNS))
	for _, name := range []string{"client", "client-default", "client-none"} {
		c.Eventually(60*time.Second, name+" succeeded", func() (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return p.Status.Phase == corev1.PodSucceeded, fmt.Errorf("phase %s", p.Status.Phase)
		})
	}
	logs := c.PodLogs(ns, "client", "main")
	for _, want := range []string{
		"nameserver " + c.DNS + "\n",
		"search dnstest.svc.cluster.local svc.cluster.local cluster.local\n",
		"options ndots:5\n",
		"lookup web-0.web: " + podIP + " ",
		"lookup front: " + frontIP + " ",
		"lookup front.dnstest: " + frontIP + " ",
		"lookup web-0.web.dnstest.svc.cluster.local: " + podIP + " ",
		// From the pod's /etc/hosts: the apiserver's real address (ClusterIPs lead nowhere).
		"lookup kubernetes.default: " + c.APIServerHost + " ",
		"lookup nosuch: FAILED",
		// A pod's own hostname is no name of its namespace's search domain.
		"lookup web-0: FAILED",
		// Through the Service's cluster IP, port 80 → the pod's 8080.
		"front says: web-0\n",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("pod client: no %q in:\n%s", want, logs)
		}
	}
	if logs := c.PodLogs(ns, "client-default", "main"); strings.Contains(logs, c.DNS) || strings.Contains(logs, "cluster.local") {
		t.Errorf("dnsPolicy Default got the cluster's DNS:\n%s", logs)
	}
	logs = c.PodLogs(ns, "client-none", "main")
	for _, want := range []string{
		"nameserver " + c.DNS + "\n",
		"search web.dnstest.svc.cluster.local\n",
		"options ndots:2 edns0\n",
		// Its one search domain is the headless Service's: the pod's own name is enough.
		"lookup web-0: " + podIP + " ",
		"lookup front: FAILED",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("pod client-none: no %q in:\n%s", want, logs)
		}
	}

	// The cluster IPs lead to the Services' endpoints.
	body := httpGet(t, "http://front.dnstest.svc/whoami")
	if strings.TrimSpace(body) != "web-0" {
		t.Errorf("http://front.dnstest.svc/whoami = %q, want web-0", body)
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Host = "https://kubernetes.default.svc" // its ClusterIP 10.96.0.1, in the serving certificate
	api, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := api.Discovery().ServerVersion(); err != nil {
		t.Errorf("the apiserver through the kubernetes Service: %v", err)
	} else {
		t.Logf("the apiserver through the kubernetes Service: %s", v.GitVersion)
	}

	// kubectl port-forward, to the pod and to a pod behind the Service (kubectl picks it and
	// maps the Service's port 80 to the pod's 8080), through the apiserver and the kubelet.
	c.PortForward(ns, "pod/web-0", "18080:8080")
	c.PortForward(ns, "svc/front", "18081:80")
	for _, url := range []string{"http://127.0.0.1:18080/whoami", "http://127.0.0.1:18081/whoami"} {
		// (Retried: a connection through a fresh forward is not guaranteed to be the first
		// thing to succeed; the forward itself is what is checked.)
		c.Eventually(30*time.Second, url+" through kubectl port-forward", func() (bool, error) {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return err == nil && strings.TrimSpace(string(body)) == "web-0", fmt.Errorf("got %q (%v)", body, err)
		})
	}

	// Not ready: the headless Service that publishes not-ready addresses still names the pod,
	// the other one has no address left; the ClusterIP Service keeps its address.
	c.Signal(ns, "web-0", "", syscall.SIGSTOP)
	defer c.Signal(ns, "web-0", "", syscall.SIGCONT)
	c.Eventually(30*time.Second, "web-0 not ready", func() (bool, error) {
		ready, err := c.PodReady(ns, "web-0")
		return err == nil && !ready, err
	})
	c.Eventually(30*time.Second, "ready.dnstest.svc without addresses", func() (bool, error) {
		in, err := dns.Exchange(new(dns.Msg).SetQuestion("ready.dnstest.svc.cluster.local.", dns.TypeA), net.JoinHostPort(c.DNS, "53"))
		if err != nil {
			return false, err
		}
		return in.Rcode == dns.RcodeSuccess && len(in.Answer) == 0, fmt.Errorf("rcode %s, answers %v", dns.RcodeToString[in.Rcode], in.Answer)
	})
	expect(r, "web-0.web.dnstest.svc.cluster.local", podIP)
	expect(r, "front.dnstest.svc.cluster.local", frontIP)
	c.Signal(ns, "web-0", "", syscall.SIGCONT)
	expect(r, "ready.dnstest.svc.cluster.local", podIP)
	if addrs, _ := r.LookupHost(ctx, "web.dnstest.svc.cluster.local"); !slices.Equal(addrs, []string{podIP}) {
		t.Errorf("web.dnstest.svc.cluster.local = %v, want [%s]", addrs, podIP)
	}
}
