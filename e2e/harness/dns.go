package harness

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"kaas/e2e/clusterdns"
	"kaas/e2e/svcproxy"
)

// ClusterDomain is the harness clusters' DNS domain.
const ClusterDomain = "cluster.local"

// Cluster DNS (see README.md, "Cluster DNS"): every cluster serves its zone on
// 10.<100+k>.0.3:53 inside the network namespace, the process kubelets' --cluster-dns. The test
// process itself (and every program it runs: clients, kubectl, the conformance suite) resolves
// through processDNSAddr, which answers from every live cluster of the process; harness.Main
// puts a resolv.conf naming it over /etc/resolv.conf in the test process' own mount namespace.
const processDNSAddr = "10.100.0.53"

// processZones are the zones processDNSAddr answers from.
var processZones clusterdns.Zones

// hostResolvConf is the machine's /etc/resolv.conf as it was before harness.Main covered it:
// the process kubelets' node resolv.conf (dnsPolicy Default).
var hostResolvConf []byte

// setupProcessDNS covers /etc/resolv.conf, in the test process' private mount namespace, with
// one that resolves cluster names as a node of the cluster would (search svc.<domain> <domain>,
// so the names brokers advertise, <pod>.<svc>.<ns>.svc, resolve), and serves the process'
// resolver on processDNSAddr.
func setupProcessDNS() error {
	var err error
	if hostResolvConf, err = os.ReadFile("/etc/resolv.conf"); err != nil && !os.IsNotExist(err) {
		return err
	}
	// NB: the file lives on a tmpfs that is detached once the file is bound, and its directory
	// is removed: nothing is left in /tmp however the process ends. (Binding a removed file
	// instead would make /etc/resolv.conf a mount on a deleted entry, on which the kubelet could
	// not mount a pod's own resolv.conf.)
	dir, err := os.MkdirTemp("", "kaas-e2e-etc-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("tmpfs for the test process' resolv.conf: %w", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	conf := fmt.Sprintf("# kaas e2e harness: cluster DNS of the test process (e2e/README.md)\n"+
		"nameserver %s\nsearch svc.%s %s\noptions ndots:5\n", processDNSAddr, ClusterDomain, ClusterDomain)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	if err := syscall.Mount(filepath.Join(dir, "resolv.conf"), "/etc/resolv.conf", "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind a resolv.conf over /etc/resolv.conf: %w", err)
	}
	if err := addLoopbackAddr(processDNSAddr); err != nil {
		return err
	}
	_, err = clusterdns.Serve(net.JoinHostPort(processDNSAddr, "53"), &processZones)
	return err
}

// startDNS serves the cluster's zone on DNS (10.<100+k>.0.3:53), and from the process' resolver
// too, until Stop. Outside the network namespace there is no cluster DNS: port 53 of the
// machine is not the harness' to take, and pods could not be given another port.
func (c *Env) startDNS(ctx context.Context) error {
	if !InNetns() {
		return nil
	}
	host := c.subnet + ".0.3"
	if err := addLoopbackAddr(host); err != nil {
		return err
	}
	zctx, cancel := context.WithCancel(context.Background())
	zone := clusterdns.NewZone(zctx, c.Client, ClusterDomain)
	if err := zone.WaitSynced(ctx); err != nil {
		cancel()
		return err
	}
	srv, err := clusterdns.Serve(net.JoinHostPort(host, "53"), zone)
	if err != nil {
		cancel()
		return err
	}
	processZones.Add(zone)
	c.DNS = host
	c.mu.Lock()
	c.stopDNS = func() {
		processZones.Remove(zone)
		srv.Close()
		cancel()
	}
	c.mu.Unlock()
	return nil
}

// nodeResolvConf is the file the kubelets read as the node's resolv.conf (dnsPolicy Default):
// the machine's, as it was before the test process covered it.
func (c *Env) nodeResolvConf() (string, error) {
	if !InNetns() {
		return "/etc/resolv.conf", nil
	}
	path := filepath.Join(c.Dir, "node-resolv.conf")
	return path, os.WriteFile(path, hostResolvConf, 0o644)
}

// Resolver is a Go resolver that asks this cluster's DNS server (Env.DNS) directly, with no
// search path: it needs fully qualified names (<svc>.<ns>.svc.cluster.local). The test
// process' default resolver already resolves cluster names through its resolv.conf.
func (c *Env) Resolver() *net.Resolver {
	addr := net.JoinHostPort(c.DNS, "53")
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		return d.DialContext(ctx, network, addr)
	}}
}

// startServiceProxy makes the cluster's Services reachable inside the network namespace
// (svcproxy: a TCP relay per cluster IP, node address and load-balancer address and port,
// kube-proxy's old userspace mode, a load-balancer controller, and an ingress controller for
// ingressClasses: ingress.go): the service range and the load-balancer pool are routed to `lo`
// as local addresses, so that the relays can bind any address of them (node addresses are on
// `lo` already).
func (c *Env) startServiceProxy(ctx context.Context, ingressClasses []string) error {
	if !InNetns() {
		return nil
	}
	for _, cidr := range []string{serviceCIDR, c.LoadBalancerPool} {
		out, err := exec.Command("ip", "route", "replace", "local", cidr, "dev", "lo").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip route replace local %s dev lo: %v: %s", cidr, err, out)
		}
	}
	ingress, err := c.ingressOptions(ingressClasses)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(c.logPath("service-proxy"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logger := log.New(f, "", log.LstdFlags|log.Lmicroseconds)
	pctx, cancel := context.WithCancel(context.Background())
	opts := svcproxy.Options{LoadBalancerPool: netip.MustParsePrefix(c.LoadBalancerPool), Ingress: ingress, Logf: logger.Printf}
	if _, err := svcproxy.Start(pctx, c.Client, opts); err != nil {
		cancel()
		f.Close()
		return err
	}
	c.mu.Lock()
	c.stopProxy = func() {
		cancel()
		f.Close()
	}
	c.mu.Unlock()
	return c.installIngress(ctx, ingress)
}
