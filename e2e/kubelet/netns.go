package kubelet

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Each pod that is not hostNetwork gets a network namespace of its own, as a CNI plugin gives
// it on a real node: `lo` and an `eth0` holding the pod IP (/32), one end of a veth pair whose
// other end stays in the node's (the harness') namespace with a host route to the pod IP. The
// pod's default route goes to podGateway, a link-local address on every host end (Calico's
// layout), so pods reach each other, Service cluster IPs, the cluster DNS and the apiserver
// through the node's namespace, which forwards. A program may therefore bind `0.0.0.0` or
// `[::]` in two pods at once, and `kubectl port-forward` dials localhost in the pod.

// podGateway is the pods' next hop: an address on every host-side veth end.
const podGateway = "169.254.1.1"

// netnsName is the name of a pod IP's namespace (`ip netns`, /run/netns/<name>).
func netnsName(ip string) string { return "pod-" + strings.ReplaceAll(ip, ".", "-") }

// netnsPath is the file that names a pod IP's namespace, for setns(2).
func netnsPath(ip string) string { return "/run/netns/" + netnsName(ip) }

// hostVeth is the host-side name of a pod IP's veth pair: at most 15 characters, so the last
// three octets (every harness address is in 10.0.0.0/8).
func hostVeth(ip string) string {
	parts := strings.Split(ip, ".")
	return "kh" + strings.Join(parts[len(parts)-3:], "-")
}

// setupPodNetwork makes ip's namespace afresh (one a killed kubelet left behind is replaced)
// and wires it to the node's namespace, whose address nodeIP is the source of the node's
// traffic to the pod, as on a real node.
func setupPodNetwork(ip, nodeIP string) error {
	teardownPodNetwork(ip)
	// The node's namespace forwards between pods (this process lives in it: /proc/sys/net is
	// that namespace's).
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("pod network for %s: enabling forwarding: %w", ip, err)
	}
	ns, veth := netnsName(ip), hostVeth(ip)
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "addr", "replace", podGateway + "/32", "dev", veth},
		{"ip", "link", "set", veth, "up"},
		{"ip", "route", "replace", ip + "/32", "dev", veth, "src", nodeIP},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", ip + "/32", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", podGateway, "dev", "eth0", "scope", "link"},
		{"ip", "-n", ns, "route", "add", "default", "via", podGateway, "dev", "eth0", "src", ip},
	}
	for _, step := range steps {
		if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
			teardownPodNetwork(ip)
			return fmt.Errorf("pod network for %s: %s: %v: %s", ip, strings.Join(step, " "), err, out)
		}
	}
	return nil
}

// teardownPodNetwork removes ip's namespace; its veth pair and host route go with it.
func teardownPodNetwork(ip string) {
	_ = exec.Command("ip", "netns", "del", netnsName(ip)).Run()
	_ = exec.Command("ip", "link", "del", hostVeth(ip)).Run()
}
