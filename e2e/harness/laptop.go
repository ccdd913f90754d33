package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"kaas/e2e/netns"
)

// A laptop is a machine outside the cluster, for testing external access (NodePort and
// LoadBalancer Services) as a client on another network would: a network namespace of its own,
// wired to the harness' namespace as a pod is (a veth pair, the far end's 169.254.1.1 as next
// hop: kubelet/netns.go), whose only routes lead to the nodes' addresses (/32 each) and to the
// load-balancer pool. Pod IPs, cluster IPs, the apiserver and the cluster DNS have no route
// there, so a dial to them fails at once (ENETUNREACH), as from a laptop whose router knows only
// the nodes and the load balancers. Its programs also get a mount namespace of their own where
// /etc/resolv.conf names no cluster DNS and /etc/hosts only localhost and what AddHost adds:
// clients on the laptop dial addresses, or the names a user's DNS would know (an Ingress host
// at the ingress controller's address), never cluster names.
//
// Both namespaces are held by one process that only sleeps, as a pod's pause container holds
// a pod's: the laptop is /proc/<pid>/ns/{net,mnt}. (A mount namespace kept by a bind mount of
// its nsfs file, `unshare --mount=<file>`, fails at random on this kernel with EINVAL: the
// "newer namespace" check of the bind compares namespace ids that are not ordered across CPUs.)

// laptopGateway is the laptop's next hop, on the harness' end of its veth pair (the pods' too).
const laptopGateway = "169.254.1.1"

// laptopHolder makes the laptop's files cover /etc's in its fresh mount namespace ($1, $2), says
// so, and holds its namespaces until it is killed.
const laptopHolder = `mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/hosts && echo ready && exec sleep infinity`

// Laptop is a cluster's laptop (Env.Laptop); it goes away with the cluster.
type Laptop struct {
	// IP is the laptop's own address (192.168.<k>.2 for the k-th cluster of the process), where
	// its connections come from as the harness' namespace sees them.
	IP string

	veth    string     // the harness' end of its veth pair
	dir     string     // its resolv.conf and hosts
	holder  *exec.Cmd  // the process that holds its namespaces
	ns      string     // /proc/<holder>/ns/
	hostsMu sync.Mutex // orders AddHost's appends and DialContext's reads of the hosts file
}

// Laptop returns the cluster's laptop, making it on first use. It needs the harness' network
// namespace (root).
func (c *Env) Laptop() (*Laptop, error) {
	c.laptopMu.Lock()
	defer c.laptopMu.Unlock()
	if c.laptop != nil {
		return c.laptop, nil
	}
	if !InNetns() {
		return nil, errors.New("laptop: needs the harness' network namespace (root, KAAS_E2E_NETNS not 0)")
	}
	l := &Laptop{IP: fmt.Sprintf("192.168.%d.2", c.seq), veth: fmt.Sprintf("klaptop%d", c.seq),
		dir: filepath.Join(c.Dir, "laptop")}
	if err := l.setup(c.laptopRoutes()); err != nil {
		l.teardown()
		return nil, err
	}
	c.laptop = l
	c.mu.Lock()
	c.stopLaptop = l.teardown
	c.mu.Unlock()
	return l, nil
}

// laptopRoutes are the destinations the laptop reaches: each node's address and the pool. The
// node addresses are those the harness gave the kubelets (the InternalIPs they register), so
// that a node that is down when the laptop is made is routed too.
func (c *Env) laptopRoutes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var routes []string
	for _, ip := range c.nodeIPs {
		routes = append(routes, ip+"/32")
	}
	sort.Strings(routes)
	return append(routes, c.LoadBalancerPool)
}

// setup starts the laptop's holder and wires its network namespace to the harness' namespace
// with routes to dests only.
func (l *Laptop) setup(dests []string) error {
	if err := l.startHolder(); err != nil {
		return err
	}
	_ = exec.Command("ip", "link", "del", l.veth).Run() // a previous cluster's of this number
	// ip in the laptop's network namespace
	in := func(args ...string) []string {
		return append([]string{"nsenter", "--net=" + l.ns + "net", "--", "ip"}, args...)
	}
	steps := [][]string{
		{"ip", "link", "add", l.veth, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(l.holder.Process.Pid)},
		{"ip", "addr", "replace", laptopGateway + "/32", "dev", l.veth},
		{"ip", "link", "set", l.veth, "up"},
		{"ip", "route", "replace", l.IP + "/32", "dev", l.veth},
		in("link", "set", "lo", "up"),
		in("addr", "add", l.IP+"/32", "dev", "eth0"),
		in("link", "set", "eth0", "up"),
		in("route", "add", laptopGateway, "dev", "eth0", "scope", "link"),
	}
	for _, d := range dests {
		steps = append(steps, in("route", "add", d, "via", laptopGateway, "dev", "eth0", "src", l.IP))
	}
	for _, step := range steps {
		if err := run(step...); err != nil {
			return fmt.Errorf("laptop: %w", err)
		}
	}
	return nil
}

// startHolder writes the laptop's resolv.conf and hosts and starts the process that holds its
// namespaces: new network and mount namespaces (Go makes the mount namespace's / private, so
// its binds stay in it), dying with the test process. It returns once the binds are made.
func (l *Laptop) startHolder() error {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	resolv, hosts := filepath.Join(l.dir, "resolv.conf"), filepath.Join(l.dir, "hosts")
	// No server: 127.0.0.1:53 refuses, so every lookup fails at once.
	if err := os.WriteFile(resolv, []byte("# kaas e2e laptop: no DNS server knows the cluster's names; dial node and\n"+
		"# load-balancer addresses (e2e/README.md)\nnameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(hosts, []byte(fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\tlaptop\n", l.IP)), 0o644); err != nil {
		return err
	}
	cmd := exec.Command("sh", "-c", laptopHolder, "laptop", resolv, hosts)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("laptop: %w", err)
	}
	l.holder, l.ns = cmd, fmt.Sprintf("/proc/%d/ns/", cmd.Process.Pid)
	line, _ := bufio.NewReader(out).ReadString('\n') // EOF if it exits
	if line != "ready\n" {
		_ = cmd.Wait()
		return fmt.Errorf("laptop: %s %q: %v: %s", cmd.Path, laptopHolder, cmd.ProcessState, stderr.Bytes())
	}
	return nil
}

// teardown kills the holder, and with its namespaces go the veth pair and routes (programs still
// running on the laptop keep what they hold).
func (l *Laptop) teardown() {
	if l.holder != nil && l.holder.ProcessState == nil {
		_ = l.holder.Process.Kill()
		_ = l.holder.Wait()
	}
	_ = exec.Command("ip", "link", "del", l.veth).Run()
}

// Command runs a program on the laptop: in its network and mount namespaces (nsenter, which
// execs the program, so the process is the program), in the working directory the command is
// given (cmd.Dir, else the test's). Like every process of the harness it dies with the test
// process.
func (l *Laptop) Command(name string, args ...string) *exec.Cmd {
	argv := append([]string{"--net=" + l.ns + "net", "--mount=" + l.ns + "mnt",
		// nsenter opens the directory before entering the mount namespace, which would
		// otherwise leave the program in /.
		"--wd=.", "--", name}, args...)
	cmd := exec.Command("nsenter", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// DialContext connects from the laptop to addr, an IP address and port or a name of the laptop's
// hosts file (AddHost; it has no DNS), for clients in the test process: http.Transport's
// DialContext, franz-go's kgo.Dialer. The socket lives in the laptop's network namespace
// (netns.Dial).
func (l *Laptop) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("laptop: dial %s: %w", addr, err)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		ip, err := l.lookupHost(host)
		if err != nil {
			return nil, fmt.Errorf("laptop: dial %s: %w", addr, err)
		}
		addr = net.JoinHostPort(ip, port)
	}
	return netns.Dial(ctx, l.ns+"net", network, addr)
}

// AddHost makes name resolve to ip on the laptop, as a user's DNS would name a cluster's
// external hosts (an Ingress host at the ingress controller's address, IngressIP): a line of
// the laptop's own hosts file, which its programs see as /etc/hosts and DialContext reads.
func (l *Laptop) AddHost(name, ip string) error {
	if _, err := netip.ParseAddr(ip); err != nil {
		return fmt.Errorf("laptop: add host %s: %w", name, err)
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n#") {
		return fmt.Errorf("laptop: add host %q: not a host name", name)
	}
	l.hostsMu.Lock()
	defer l.hostsMu.Unlock()
	// Appended to, never replaced: the holder's bind over /etc/hosts holds this file's inode.
	f, err := os.OpenFile(filepath.Join(l.dir, "hosts"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("laptop: add host %s: %w", name, err)
	}
	if _, err := fmt.Fprintf(f, "%s\t%s\n", ip, name); err != nil {
		f.Close()
		return fmt.Errorf("laptop: add host %s: %w", name, err)
	}
	return f.Close()
}

// lookupHost is name's address in the laptop's hosts file: the first line naming it, as glibc's
// files source answers.
func (l *Laptop) lookupHost(name string) (string, error) {
	l.hostsMu.Lock()
	b, err := os.ReadFile(filepath.Join(l.dir, "hosts"))
	l.hostsMu.Unlock()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		for i := 1; i < len(f); i++ {
			if strings.EqualFold(f[i], strings.TrimSuffix(name, ".")) {
				return f[0], nil
			}
		}
	}
	return "", fmt.Errorf("%s: not in the laptop's hosts file (Laptop.AddHost; the laptop has no DNS)", name)
}

// run runs a command, its output in the error.
func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return nil
}
