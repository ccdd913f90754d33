package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// serviceCIDR is where cluster IPs come from; inside the network namespace the service proxy
	// (startServiceProxy) serves them. Pods reach the apiserver through KUBERNETES_SERVICE_HOST,
	// which the kubelet sets to the real address.
	serviceCIDR = "10.96.0.0/16"
	// StorageClass is the class of the pre-created RWX volumes.
	StorageClass = "kaas-e2e-rwx"
)

func (c *Env) logPath(name string) string { return filepath.Join(c.Dir, "logs", name+".log") }

func (c *Env) startControlPlane(ctx context.Context) error {
	etcdURL, err := c.startEtcd(ctx)
	if err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, etcdURL); err != nil {
		return err
	}
	cm, err := c.pki.issue("controller-manager", "system:kube-controller-manager", nil, nil, nil, false)
	if err != nil {
		return err
	}
	cmKubeconfig, err := c.kubeconfig("controller-manager", cm)
	if err != nil {
		return err
	}
	saKey := filepath.Join(c.Dir, "pki", "sa.key")
	p, err := startProc("kube-controller-manager", filepath.Join(c.k8sBin, "kube-controller-manager"), []string{
		"--kubeconfig=" + cmKubeconfig,
		"--authentication-kubeconfig=" + cmKubeconfig,
		"--authorization-kubeconfig=" + cmKubeconfig,
		// Each controller gets its own service account, as in a real cluster, so RBAC gaps in
		// the bootstrap roles would show up here too.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + saKey,
		"--root-ca-file=" + c.pki.CAFile,
		"--cluster-signing-cert-file=" + c.pki.CAFile,
		"--cluster-signing-key-file=" + filepath.Join(c.Dir, "pki", "ca.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		// Notice a killed node (kubelet) within seconds rather than minutes.
		"--node-monitor-period=2s",
		"--node-monitor-grace-period=20s",
		"--v=1",
	}, nil, c.logPath("kube-controller-manager"))
	if err != nil {
		return err
	}
	c.addProc(p)
	sched, err := c.pki.issue("scheduler", "system:kube-scheduler", nil, nil, nil, false)
	if err != nil {
		return err
	}
	schedKubeconfig, err := c.kubeconfig("scheduler", sched)
	if err != nil {
		return err
	}
	p, err = startProc("kube-scheduler", filepath.Join(c.k8sBin, "kube-scheduler"), []string{
		"--kubeconfig=" + schedKubeconfig,
		"--authentication-kubeconfig=" + schedKubeconfig,
		"--authorization-kubeconfig=" + schedKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--v=1",
	}, nil, c.logPath("kube-scheduler"))
	if err != nil {
		return err
	}
	c.addProc(p)
	return nil
}

func (c *Env) startEtcd(ctx context.Context) (string, error) {
	client, err := freePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	peer, err := freePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	clientURL := "http://" + hostPort("127.0.0.1", client)
	peerURL := "http://" + hostPort("127.0.0.1", peer)
	p, err := startProc("etcd", filepath.Join(c.etcdBin, "etcd"), []string{
		"--name=kaas-e2e",
		"--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=kaas-e2e=" + peerURL,
		// Test data: durability across a machine crash is worthless, fsync latency is not.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, nil, c.logPath("etcd"))
	if err != nil {
		return "", err
	}
	c.addProc(p)
	err = poll(ctx, "etcd /health", func() (bool, error) {
		if done, err := p.exited(); done {
			return false, fmt.Errorf("etcd exited: %v (see %s)", err, p.log)
		}
		resp, err := http.Get(clientURL + "/health")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
	return clientURL, err
}

func (c *Env) startAPIServer(ctx context.Context, etcdURL string) error {
	port, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	c.APIServerPort = port
	serving, err := c.pki.issue("apiserver", "kube-apiserver", nil,
		ipList("127.0.0.1", c.APIServerHost, "10.96.0.1"),
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"}, true)
	if err != nil {
		return err
	}
	// The apiserver's client identity towards kubelets (for kubectl logs).
	kubeletClient, err := c.pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
		nil, nil, nil, false)
	if err != nil {
		return err
	}
	saPriv, saPub, err := c.pki.serviceAccountKeys()
	if err != nil {
		return err
	}
	// Inside the netns: 127.0.0.1 for tests, the node address for pods. Outside it the only
	// address is loopback, which Endpoints validation refuses for the `kubernetes` service (so
	// no endpoint reconciler), and 0.0.0.0 would expose the apiserver on the host.
	bind, reconciler := "0.0.0.0", "lease"
	if !InNetns() {
		bind, reconciler = "127.0.0.1", "none"
	}
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + bind,
		"--endpoint-reconciler-type=" + reconciler,
		"--advertise-address=" + c.APIServerHost,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + serving.Cert,
		"--tls-private-key-file=" + serving.Key,
		"--client-ca-file=" + c.pki.CAFile,
		"--kubelet-client-certificate=" + kubeletClient.Cert,
		"--kubelet-client-key=" + kubeletClient.Key,
		// Node names do not resolve; the process kubelet serves on its InternalIP.
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		// The default plugins plus NodeRestriction, as kubeadm clusters run.
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saPriv,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	p, err := startProc("kube-apiserver", filepath.Join(c.k8sBin, "kube-apiserver"), args, nil,
		c.logPath("kube-apiserver"))
	if err != nil {
		return err
	}
	c.addProc(p)

	admin, err := c.pki.issue("admin", "kubernetes-admin", []string{"system:masters"}, nil, nil, false)
	if err != nil {
		return err
	}
	if c.Kubeconfig, err = c.kubeconfig("admin", admin); err != nil {
		return err
	}
	if c.Config, err = loadConfig(c.Kubeconfig); err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	// /readyz covers etcd, the RBAC bootstrap roles and the other post-start hooks.
	return poll(ctx, "kube-apiserver /readyz", func() (bool, error) {
		if done, err := p.exited(); done {
			return false, fmt.Errorf("kube-apiserver exited: %v (see %s)", err, p.log)
		}
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	})
}

// createVolumes makes the StorageClass and one RWX PersistentVolume per name, each a host
// directory under Dir/volumes that every pod mounting it shares, like an NFS export.
func (c *Env) createVolumes(ctx context.Context, names []string) error {
	bindImmediate := storagev1.VolumeBindingImmediate
	_, err := c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &bindImmediate,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, name := range names {
		if err := c.AddVolume(ctx, name, "10Gi"); err != nil {
			return err
		}
	}
	return nil
}

// AddVolume creates a ReadWriteMany PersistentVolume named name backed by VolumeDir(name).
func (c *Env) AddVolume(ctx context.Context, name, size string) error {
	dir := c.VolumeDir(name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	_, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              StorageClass,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir},
			},
		},
	}, metav1.CreateOptions{})
	return err
}

// VolumeDir is the host directory behind the pre-created PersistentVolume name.
func (c *Env) VolumeDir(name string) string { return filepath.Join(c.Dir, "volumes", name) }

// startKubelet starts one process kubelet with a node client certificate, so that the Node
// authorizer and NodeRestriction admission limit it exactly as they limit a real kubelet.
func (c *Env) startKubelet(name, podPrefix, images string) error {
	cert, err := c.pki.issue("node-"+name, "system:node:"+name, []string{"system:nodes"}, nil, nil, false)
	if err != nil {
		return err
	}
	kc, err := c.kubeconfig("node-"+name, cert)
	if err != nil {
		return err
	}
	nodeIP := podPrefix + ".1"
	if InNetns() {
		if err := addLoopbackAddr(nodeIP); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.nodeIPs[name] = nodeIP
	c.mu.Unlock()
	root := filepath.Join(c.Dir, "kubelet", name)
	resolvConf, err := c.nodeResolvConf()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.kubeletArgs[name] = []string{
		"--kubeconfig=" + kc,
		"--node-name=" + name,
		"--node-ip=" + nodeIP,
		"--pod-prefix=" + podPrefix,
		"--add-addresses=" + strconv.FormatBool(InNetns()),
		"--root-dir=" + root,
		"--log-dir=" + filepath.Join(c.Dir, "logs", "pods"),
		"--images=" + images,
		"--path-map=" + filepath.Join(root, "paths.json"),
		"--apiserver-host=" + c.APIServerHost,
		"--apiserver-port=" + strconv.Itoa(c.APIServerPort),
		"--kubelet-version=" + strings.TrimPrefix(filepath.Base(filepath.Dir(c.k8sBin)), "k8s-"),
		"--registry-mirrors=" + strings.Join(c.mirrors, ","),
		"--cluster-dns=" + c.DNS,
		"--cluster-domain=" + ClusterDomain,
		"--resolv-conf=" + resolvConf,
	}
	c.mu.Unlock()
	return c.launchKubelet(name)
}

// launchKubelet starts (or starts again) the process kubelet of node name.
func (c *Env) launchKubelet(name string) error {
	c.mu.Lock()
	args := c.kubeletArgs[name]
	c.mu.Unlock()
	p, err := startProc("kubelet-"+name, filepath.Join(c.tools, "process-kubelet"), args, nil,
		c.logPath("kubelet-"+name))
	if err != nil {
		return err
	}
	c.addProc(p)
	c.mu.Lock()
	c.kubelets[name] = p
	c.mu.Unlock()
	return nil
}

// waitReady waits for every node to be Ready and for the default ServiceAccount, without which
// the ServiceAccount admission plugin rejects pods.
func (c *Env) waitReady(ctx context.Context) error {
	for _, n := range c.Nodes {
		err := poll(ctx, "node "+n+" Ready", func() (bool, error) {
			c.mu.Lock()
			p := c.kubelets[n]
			c.mu.Unlock()
			if p != nil {
				if done, err := p.exited(); done {
					return false, fmt.Errorf("kubelet %s exited: %v (see %s)", n, err, p.log)
				}
			}
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					return cond.Status == corev1.ConditionTrue, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return poll(ctx, "default ServiceAccount", func() (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// poll calls cond every 100ms until it returns true or an error, or ctx ends.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
