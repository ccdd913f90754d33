// Package harness runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) on this machine, plus process kubelets that run pods as
// local processes, for end-to-end tests. See e2e/README.md.
package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options tune a cluster. The zero value is a one-node cluster with one RWX volume.
type Options struct {
	// Nodes is the number of process kubelets (default 1), named kaas-e2e-node-0, -1, ...
	Nodes int
	// Images maps container images to local binaries, on top of the default table
	// ("kaas-e2e/testpod*" → cmd/testpod). Keys are path.Match patterns; see README.md.
	Images map[string]string
	// Volumes are pre-created ReadWriteMany PersistentVolumes backed by host directories
	// (default: one named "shared"). A PVC binds to one by storageClassName "kaas-e2e-rwx"
	// (or by volumeName).
	Volumes []string
	// Registry serves an OCI registry on a harness address (Env.Registry) and pushes
	// RegistryImages into it before the kubelets start: OCI layout directory → repository
	// ("kaas/kaas"), every tag of the layout. Images not in the image table are pulled by
	// reference; Mirrors names registries ("ghcr.io") whose images the kubelets pull from the
	// harness registry instead, as a containerd registry mirror would.
	Registry       bool
	RegistryImages map[string]string
	Mirrors        []string
	// IngressClasses are the IngressClasses the harness' ingress controller serves (TLS
	// passthrough, as ingress-nginx with --enable-ssl-passthrough: ingress.go); an IngressClass
	// object of each is created with ingress-nginx's controller name. nil: DefaultIngressClass
	// ("nginx"); empty: no ingress controller.
	IngressClasses []string
}

// Cluster is a running harness bound to one test; For rebinds it to a subtest. All its files
// live in Dir.
type Cluster struct {
	t testing.TB
	*Env
}

// For returns the same cluster reporting failures to t (use it inside t.Run: a test may only
// fail itself from its own goroutine).
func (c *Cluster) For(t testing.TB) *Cluster { return &Cluster{t: t, Env: c.Env} }

// Env is the state of a running harness, shared by every Cluster view of it.
type Env struct {
	Dir        string
	Kubeconfig string // admin (system:masters) kubeconfig
	Config     *rest.Config
	Client     *kubernetes.Clientset
	// APIServerHost and APIServerPort are where pods reach the apiserver
	// (KUBERNETES_SERVICE_HOST/PORT).
	APIServerHost string
	APIServerPort int
	Nodes         []string
	// Registry is host:port of the harness registry (Options.Registry), "" without one.
	Registry string
	// DNS is the address of the cluster DNS server (port 53), the kubelets' --cluster-dns; ""
	// outside the network namespace, where there is none.
	DNS string
	// LoadBalancerPool is where the service proxy gives LoadBalancer Services their address
	// (status.loadBalancer.ingress), 172.30.<k>.0/24 for the k-th cluster of the process; ""
	// outside the network namespace, where there is no service proxy.
	LoadBalancerPool string

	k8sBin, etcdBin, tools string
	pki                    *pki
	seq                    int32             // k: this is the process' k-th cluster
	subnet                 string            // e.g. "10.101" inside the netns
	nodeIPs                map[string]string // node name → the address the harness gave it
	mu                     sync.Mutex
	procs                  []*proc
	kubelets               map[string]*proc
	kubeletArgs            map[string][]string
	mirrors                []string // registry=host:port for the kubelets
	ingressIP              string   // the ingress controller's address (IngressIP)
	stopDNS                func()
	stopProxy              func()
	stopLaptop             func()
	onStop                 []func() // OnStop's, run first by Stop
	laptopMu               sync.Mutex
	laptop                 *Laptop
	stopOnce               sync.Once
}

var clusterSeq atomic.Int32

// Start brings a cluster up and registers its teardown with t.Cleanup. On test failure the
// logs of every process are written to the test output; KAAS_E2E_KEEP=1 keeps the directory.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	env, err := Launch(opts)
	c := &Cluster{t: t, Env: env}
	if env != nil {
		t.Cleanup(func() {
			if t.Failed() {
				env.DumpLogs(t.Logf)
			}
			env.Stop()
		})
	}
	if err != nil {
		t.Fatalf("harness: start cluster: %v", err)
	}
	return c
}

// Launch brings a cluster up outside a test (cmd/e2e-up); the caller must call Stop, also
// when Launch fails and returns a non-nil Env.
func Launch(opts Options) (*Env, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	if opts.Volumes == nil {
		opts.Volumes = []string{"shared"}
	}
	if opts.IngressClasses == nil {
		opts.IngressClasses = []string{DefaultIngressClass}
	}
	if err := prepareBinaries(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kaas-e2e-")
	if err != nil {
		return nil, err
	}
	c := &Env{
		Dir: dir, kubelets: map[string]*proc{}, kubeletArgs: map[string][]string{}, nodeIPs: map[string]string{},
		k8sBin: os.Getenv(envK8sBin), etcdBin: os.Getenv(envEtcdBin), tools: os.Getenv(envTools),
	}
	live.Lock()
	live.envs[c] = true
	live.Unlock()
	for _, d := range []string{"logs", "pki", "etcd", "volumes"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return c, err
		}
	}
	// Addresses: inside the private netns every cluster of this process gets its own 10.(100+k)/16,
	// node i is 10.(100+k).(i+1).1 and its pods .2-.254 of that /24; its load-balancer pool is
	// 172.30.k.0/24 and its laptop 192.168.k.2 (laptop.go), both outside every 10.x range. Without
	// the netns the apiserver and pods fall back to 127.x (and EndpointSlices will refuse pod
	// addresses).
	seq := clusterSeq.Add(1)
	c.seq = seq
	if InNetns() {
		c.subnet = fmt.Sprintf("10.%d", 100+seq)
		c.LoadBalancerPool = fmt.Sprintf("172.30.%d.0/24", seq)
		c.APIServerHost = c.subnet + ".0.1"
		if err := addLoopbackAddr(c.APIServerHost); err != nil {
			return c, err
		}
	} else {
		c.subnet = fmt.Sprintf("127.%d", 100+(os.Getpid()+int(seq))%100)
		c.APIServerHost = "127.0.0.1"
	}
	if c.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	if err := c.startDNS(ctx); err != nil {
		return c, err
	}
	if err := c.startServiceProxy(ctx, opts.IngressClasses); err != nil {
		return c, err
	}
	if err := c.createVolumes(ctx, opts.Volumes); err != nil {
		return c, err
	}
	images, err := c.writeImageTable(opts.Images)
	if err != nil {
		return c, err
	}
	if opts.Registry || len(opts.RegistryImages) > 0 {
		if err := c.startRegistry(ctx); err != nil {
			return c, err
		}
		if err := c.pushImages(opts.RegistryImages); err != nil {
			return c, err
		}
		for _, m := range opts.Mirrors {
			c.mirrors = append(c.mirrors, m+"="+c.Registry)
		}
	}
	for i := 0; i < opts.Nodes; i++ {
		name := fmt.Sprintf("kaas-e2e-node-%d", i)
		if err := c.startKubelet(name, fmt.Sprintf("%s.%d", c.subnet, i+1), images); err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, name)
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// Stop tears everything down (kubelets and their pods first, etcd last) and removes Dir unless
// KAAS_E2E_KEEP=1. Safe to call more than once.
func (c *Env) Stop() {
	c.stopOnce.Do(func() {
		live.Lock()
		delete(live.envs, c)
		live.Unlock()
		c.mu.Lock()
		onStop := append([]func(){}, c.onStop...)
		c.mu.Unlock()
		for i := len(onStop) - 1; i >= 0; i-- {
			onStop[i]()
		}
		c.mu.Lock()
		procs := append([]*proc(nil), c.procs...)
		c.mu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop(10 * time.Second)
		}
		c.mu.Lock()
		stops := []func(){c.stopLaptop, c.stopDNS, c.stopProxy}
		c.mu.Unlock()
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
		if os.Getenv("KAAS_E2E_KEEP") == "1" {
			fmt.Fprintf(os.Stderr, "harness: KAAS_E2E_KEEP=1, leaving %s\n", c.Dir)
			return
		}
		_ = os.RemoveAll(c.Dir)
	})
}

// OnStop registers f to run when the cluster stops, before anything of the harness stops (last
// registered first): for what a test runs beside the harness, such as a real kubelet and its
// container runtime (images/realkubelet_test.go), whose shims and containers would outlive the
// test process. Unlike t.Cleanup it also runs on Ctrl-C and SIGTERM (stopOnSignal).
func (c *Env) OnStop(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onStop = append(c.onStop, f)
}

func (c *Env) addProc(p *proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = append(c.procs, p)
}

// writeImageTable writes the image→binary table the kubelets read (JSON object).
func (c *Env) writeImageTable(extra map[string]string) (string, error) {
	table := map[string]string{
		"kaas-e2e/testpod":   TestpodBinary(),
		"kaas-e2e/testpod:*": TestpodBinary(),
	}
	if f := os.Getenv("KAAS_E2E_IMAGES"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if err := json.Unmarshal(b, &table); err != nil {
			return "", fmt.Errorf("KAAS_E2E_IMAGES %s: %w", f, err)
		}
	}
	for k, v := range extra {
		table[k] = v
	}
	b, _ := json.MarshalIndent(table, "", "  ")
	path := filepath.Join(c.Dir, "images.json")
	return path, os.WriteFile(path, b, 0o644)
}

// kubeconfig writes a kubeconfig for a client certificate and returns its path.
func (c *Env) kubeconfig(name string, cp certPair) (string, error) {
	path := filepath.Join(c.Dir, name+".kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kaas-e2e
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: kaas-e2e
  context: {cluster: kaas-e2e, user: %s}
current-context: kaas-e2e
`, hostPort(c.APIServerHost, c.APIServerPort), c.pki.CAFile, name, cp.Cert, cp.Key, name)
	return path, os.WriteFile(path, []byte(text), 0o600)
}

func loadConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

func ipList(ips ...string) []net.IP {
	var out []net.IP
	for _, s := range ips {
		out = append(out, net.ParseIP(s))
	}
	return out
}

// NodeKubeconfig writes a kubeconfig with a node client certificate (system:node:<name> in
// system:nodes) for a kubelet the test runs itself, such as a real kubelet
// (images/realkubelet_test.go): the Node authorizer and NodeRestriction limit it as they limit
// the harness' own kubelets.
func (c *Env) NodeKubeconfig(name string) (string, error) {
	cert, err := c.pki.issue("node-"+name, "system:node:"+name, []string{"system:nodes"}, nil, nil, false)
	if err != nil {
		return "", err
	}
	return c.kubeconfig("node-"+name, cert)
}
