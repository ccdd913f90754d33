package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

// TestExternalListener: a KafkaCluster with an external listener, used from a laptop — a network
// namespace that reaches only the nodes and the load-balancer pool, not pods, cluster IPs or the
// cluster DNS — with Debian's kcat, as a user outside the cluster would. First type nodeport:
// the bootstrap node port gets kcat the metadata of three brokers, each at a node's address and
// its own node port, and records produced there are read back in a consumer group (whose
// coordinator is found through the external listener too). Then type loadbalancer: only
// Services and the addresses ConfigMap change — no broker restarts — and the same records are
// read back through the load balancers' addresses. Then type ingress with the operator's TLS:
// the records again, through an ingress controller passing TLS through by server name, each
// broker's certificate checked against its host.
func TestExternalListener(t *testing.T) {
	c := startWithOperator(t)
	laptop, err := c.Laptop()
	if err != nil {
		t.Fatal(err)
	}
	cluster := func(kind string) string {
		return kaastest.Cluster("  listener:\n    external: {type: " + kind + "}\n")
	}
	c.Apply(cluster("nodeport") + "---\n" + kaastest.Topic("outside", 3, ""))
	c.WaitJSONPath(5*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
	c.WaitJSONPath(2*time.Minute, ns, "kafkatopic", "outside", `.status.conditions[?(@.type=="Ready")].status`, "True")

	nodes := map[string]bool{}
	for _, node := range c.Nodes {
		nodes[c.NodeIP(node)] = true
	}
	nodePorts := map[string]bool{}
	for id := 0; id < 3; id++ {
		nodePorts[c.JSONPath(ns, "service", fmt.Sprintf("kc-external-%d", id), ".spec.ports[0].nodePort")] = true
	}
	bootstrap := externalBootstrap(c, "")
	host, port, _ := strings.Cut(bootstrap, ":")
	if !nodes[host] || port != c.JSONPath(ns, "service", "kc-external-bootstrap", ".spec.ports[0].nodePort") {
		t.Fatalf("externalBootstrapServers %q is not a node at the bootstrap node port", bootstrap)
	}
	brokers := announcedFromLaptop(c, laptop, bootstrap, func(address string) bool {
		host, port, _ := strings.Cut(address, ":")
		return nodes[host] && nodePorts[port]
	})
	t.Logf("nodeport: bootstrap %s, brokers %v", bootstrap, brokers)

	want := make([]string, 300)
	for i := range want {
		want[i] = fmt.Sprintf("record-%03d", i)
	}
	produce := laptop.Command("kcat", "-b", bootstrap, "-t", "outside", "-P", "-X", "acks=all")
	produce.Stdin = strings.NewReader(strings.Join(want, "\n") + "\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P from the laptop: %v\n%s", err, out)
	}
	readBack(t, laptop, bootstrap, "outside-nodeport", want)

	uids, generation := kaastest.BrokerPods(c)
	c.Apply(cluster("loadbalancer"))
	lbBootstrap := externalBootstrap(c, bootstrap)
	pool := map[string]bool{c.LoadBalancerIP(ns, "kc-external-bootstrap", time.Minute): true}
	for id := 0; id < 3; id++ {
		pool[c.LoadBalancerIP(ns, fmt.Sprintf("kc-external-%d", id), time.Minute)] = true
	}
	if host, port, _ := strings.Cut(lbBootstrap, ":"); !pool[host] || port != "9093" {
		t.Fatalf("externalBootstrapServers %q is not the bootstrap load balancer at 9093", lbBootstrap)
	}
	brokers = announcedFromLaptop(c, laptop, lbBootstrap, func(address string) bool {
		host, port, _ := strings.Cut(address, ":")
		return pool[host] && port == "9093"
	})
	t.Logf("loadbalancer: bootstrap %s, brokers %v", lbBootstrap, brokers)
	readBack(t, laptop, lbBootstrap, "outside-loadbalancer", want)
	if u, g := kaastest.BrokerPods(c); u != uids || g != generation {
		t.Fatalf("switching the external listener's type restarted brokers: pods %q -> %q, generation %s -> %s", uids, u, generation, g)
	}

	// Type ingress: TLS (the operator's certificate, which then names the ingress hosts) passed
	// through by an ingress controller that routes by server name; the laptop's DNS points the
	// hosts at the controller. Adding TLS rolls the brokers.
	hosts := []string{"bootstrap.kafka.example", "b0.kafka.example", "b1.kafka.example", "b2.kafka.example"}
	for _, host := range hosts {
		if err := laptop.AddHost(host, c.IngressIP()); err != nil {
			t.Fatal(err)
		}
	}
	c.Apply(kaastest.Cluster(`  listener:
    tls: {}
    external:
      type: ingress
      class: nginx
      bootstrap: {host: bootstrap.kafka.example}
      brokers: [{broker: 0, host: b0.kafka.example}, {broker: 1, host: b1.kafka.example}, {broker: 2, host: b2.kafka.example}]
`))
	// The operator writes the new bootstrap after the StatefulSet's new template: from then on
	// the rollout's status is the roll's.
	ingressBootstrap := externalBootstrap(c, lbBootstrap)
	c.MustKubectl("-n", ns, "rollout", "status", "statefulset/kc", "--timeout=5m")
	if ingressBootstrap != "bootstrap.kafka.example:443" {
		t.Fatalf("externalBootstrapServers %q, want the bootstrap host at 443", ingressBootstrap)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, []byte(secretData(t, c, "kc-cluster-ca-cert", "ca.crt")), 0o644); err != nil {
		t.Fatal(err)
	}
	// librdkafka checks each broker's certificate against the host it dials.
	tlsArgs := []string{"-X", "security.protocol=ssl", "-X", "ssl.ca.location=" + caFile}
	brokers = announcedFromLaptop(c, laptop, ingressBootstrap, func(address string) bool {
		return address == "b0.kafka.example:443" || address == "b1.kafka.example:443" || address == "b2.kafka.example:443"
	}, tlsArgs...)
	t.Logf("ingress: bootstrap %s, brokers %v", ingressBootstrap, brokers)
	readBack(t, laptop, ingressBootstrap, "outside-ingress", want, tlsArgs...)

}

// externalBootstrap waits for status.externalBootstrapServers to be set and differ from was.
func externalBootstrap(c *harness.Cluster, was string) string {
	var got string
	c.Eventually(3*time.Minute, "status.externalBootstrapServers set", func() (bool, error) {
		got = c.JSONPath(ns, "kafkacluster", "kc", ".status.externalBootstrapServers")
		return got != "" && got != was, fmt.Errorf("externalBootstrapServers %q", got)
	})
	// NodePort's lists one address per node the brokers run on: any will do.
	first, _, _ := strings.Cut(got, ",")
	return first
}

// announcedFromLaptop waits until kcat's metadata through bootstrap, asked from the laptop, lists
// three brokers at three distinct addresses each of which ok accepts, and returns them.
func announcedFromLaptop(c *harness.Cluster, laptop *harness.Laptop, bootstrap string, ok func(string) bool, extra ...string) []string {
	var addresses []string
	c.Eventually(3*time.Minute, "metadata from the laptop lists three brokers at external addresses", func() (bool, error) {
		out, err := laptop.Command("kcat", append([]string{"-b", bootstrap, "-L", "-m", "10"}, extra...)...).CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("kcat -L: %v\n%s", err, out)
		}
		addresses = nil
		seen := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			// "  broker 1 at 10.100.1.1:31234 (controller)"
			fields := strings.Fields(line)
			if len(fields) >= 4 && fields[0] == "broker" && fields[2] == "at" {
				addresses = append(addresses, fields[3])
				seen[fields[3]] = ok(fields[3])
			}
		}
		sort.Strings(addresses)
		good := len(addresses) == 3 && len(seen) == 3
		for _, accepted := range seen {
			good = good && accepted
		}
		return good, fmt.Errorf("brokers announced: %v\n%s", addresses, out)
	})
	return addresses
}

// readBack consumes topic outside in group from the laptop until the end and checks it read
// exactly want, in some order.
func readBack(t *testing.T, laptop *harness.Laptop, bootstrap, group string, want []string, extra ...string) {
	t.Helper()
	args := append([]string{"-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest", "-e", "-q"}, extra...)
	cmd := laptop.Command("kcat", append(args, "outside")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -G %s from the laptop: %v\n%s", group, err, stderr.String())
	}
	got := strings.Fields(string(out))
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("group %s read %d records through %s, want the %d produced", group, len(got), bootstrap, len(want))
	}
}
