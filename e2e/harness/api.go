package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubectlBinary is the path of the kubectl built with the control plane.
func (c *Env) KubectlBinary() string { return filepath.Join(c.k8sBin, "kubectl") }

// Kubectl runs kubectl with the admin kubeconfig and returns its combined output.
func (c *Env) Kubectl(args ...string) (string, error) {
	return c.KubectlStdin("", args...)
}

// KubectlStdin is Kubectl with stdin (for `apply -f -`).
func (c *Env) KubectlStdin(stdin string, args ...string) (string, error) {
	cmd := exec.Command(c.KubectlBinary(), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), err
}

// MustKubectl runs kubectl and fails the test on error.
func (c *Cluster) MustKubectl(args ...string) string {
	c.t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// Apply pipes manifests to `kubectl apply -f -` and fails the test on error.
func (c *Cluster) Apply(manifests string, extra ...string) string {
	c.t.Helper()
	out, err := c.KubectlStdin(manifests, append([]string{"apply", "-f", "-"}, extra...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// Eventually polls cond every 200ms until it returns true, failing the test after timeout with
// the last error cond returned.
func (c *Cluster) Eventually(timeout time.Duration, what string, cond func() (bool, error)) {
	c.t.Helper()
	if err := c.WaitFor(timeout, cond); err != nil {
		c.t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	}
}

// WaitFor polls cond every 200ms until it returns true or timeout passes; it returns the last
// error cond returned (or a timeout error).
func (c *Env) WaitFor(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last == nil {
				last = fmt.Errorf("condition still false")
			}
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Pod gets a pod, failing the test on error.
func (c *Cluster) Pod(ns, name string) *corev1.Pod {
	c.t.Helper()
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// PodReady reports whether a pod exists and has condition Ready=True.
func (c *Env) PodReady(ns, name string) (bool, error) {
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return IsReady(p), nil
}

// IsReady reports condition Ready=True.
func IsReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitPodReady waits until the pod is Ready and returns it.
func (c *Cluster) WaitPodReady(ns, name string, timeout time.Duration) *corev1.Pod {
	c.t.Helper()
	c.Eventually(timeout, "pod "+ns+"/"+name+" Ready", func() (bool, error) { return c.PodReady(ns, name) })
	return c.Pod(ns, name)
}

// PodAddr is host:port of a pod's IP, to dial from the test.
func (c *Cluster) PodAddr(ns, name string, port int) string {
	c.t.Helper()
	p := c.Pod(ns, name)
	if p.Status.PodIP == "" {
		c.t.Fatalf("pod %s/%s has no IP yet", ns, name)
	}
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))
}

// PodPID is the PID of a running container's process (from its "process://<pid>" containerID);
// container "" means the pod's first container.
func (c *Env) PodPID(ns, name, container string) (int, error) {
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	for _, cs := range p.Status.ContainerStatuses {
		if (container == "" || cs.Name == container) && cs.State.Running != nil {
			return strconv.Atoi(strings.TrimPrefix(cs.ContainerID, "process://"))
		}
	}
	return 0, fmt.Errorf("pod %s/%s has no running container %q", ns, name, container)
}

// Signal sends sig to a container's process group (the program and anything it forked):
// SIGKILL to crash it, SIGSTOP/SIGCONT to freeze and thaw it.
func (c *Cluster) Signal(ns, name, container string, sig syscall.Signal) {
	c.t.Helper()
	pid, err := c.PodPID(ns, name, container)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		c.t.Fatalf("signal %v to pod %s/%s pid %d: %v", sig, ns, name, pid, err)
	}
	c.t.Logf("harness: sent %s to pod %s/%s (pid %d)", unix.SignalName(sig), ns, name, pid)
}

// KillKubelet SIGKILLs a node's process kubelet, and with it all its pods (they die with their
// parent), like a crashed machine. The node turns NotReady after the node-monitor grace period
// (20s). RestartKubelet brings the machine back.
func (c *Cluster) KillKubelet(node string) {
	c.t.Helper()
	c.mu.Lock()
	p := c.kubelets[node]
	c.mu.Unlock()
	if p == nil {
		c.t.Fatalf("no kubelet %s", node)
	}
	if done, _ := p.exited(); !done {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// RestartKubelet kills a node's kubelet if it runs and starts it again, like a rebooted machine:
// it re-registers the node and restarts the pods still bound to it (restartCount goes up).
func (c *Cluster) RestartKubelet(node string) {
	c.t.Helper()
	c.KillKubelet(node)
	if err := c.launchKubelet(node); err != nil {
		c.t.Fatal(err)
	}
}

// MapVolume makes node's pods see dir where they would see the pre-created volume's directory
// (VolumeDir(volume)): e.g. one FUSE mount per simulated host over one backing directory. It
// applies to containers started after the call.
func (c *Cluster) MapVolume(node, volume, dir string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	path := filepath.Join(c.Dir, "kubelet", node, "paths.json")
	m := map[string]string{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	m[c.VolumeDir(volume)] = dir
	b, _ := json.Marshal(m)
	// Write and rename, so that a kubelet never reads half a file.
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		c.t.Fatal(err)
	}
}

// PodLogs returns the logs of a container of every incarnation (UID) of the pod name, oldest
// first, including the kubelet's "--- kubelet:" start/exit lines.
func (c *Env) PodLogs(ns, name, container string) string {
	dirs, _ := filepath.Glob(filepath.Join(c.Dir, "logs", "pods", ns+"_"+name+"_*"))
	sort.Slice(dirs, func(i, j int) bool { return modTime(dirs[i]).Before(modTime(dirs[j])) })
	var b strings.Builder
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*.log"))
		for _, f := range files {
			if container != "" && filepath.Base(f) != container+".log" {
				continue
			}
			data, _ := os.ReadFile(f)
			b.Write(data)
		}
	}
	return b.String()
}

func modTime(path string) time.Time {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// DumpLogs writes the tail of every log (control plane, kubelets, pods) through logf (t.Logf).
func (c *Env) DumpLogs(logf func(format string, args ...any)) {
	var files []string
	_ = filepath.Walk(filepath.Join(c.Dir, "logs"), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rel, _ := filepath.Rel(c.Dir, f)
		logf("===== %s (last 150 lines) =====\n%s", rel, tail(string(data), 150))
	}
	if out, err := c.Kubectl("get", "nodes,pods,statefulsets,endpointslices,events", "-A", "-o", "wide"); err == nil {
		logf("===== kubectl get -A =====\n%s", out)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// PortForward runs `kubectl port-forward` to target (pod/<name>, svc/<name>, ...) in ns in the
// background until the test ends, and returns once kubectl says it listens on every local
// port of ports ("LOCAL:REMOTE", as kubectl takes them).
func (c *Cluster) PortForward(ns, target string, ports ...string) {
	c.t.Helper()
	args := append([]string{"--kubeconfig", c.Kubeconfig, "-n", ns, "port-forward", "--address", "127.0.0.1", target}, ports...)
	cmd := exec.Command(c.KubectlBinary(), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	listening := make(chan struct{})
	go func() {
		lines, seen := bufio.NewScanner(out), 0
		for lines.Scan() {
			// "Forwarding from 127.0.0.1:18080 -> 8080", one line per port.
			if strings.HasPrefix(lines.Text(), "Forwarding from ") {
				if seen++; seen == len(ports) {
					close(listening)
				}
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // stderr is complete after it
		c.t.Fatalf("kubectl %s: not listening after 30 s: %s", strings.Join(args[2:], " "), stderr.String())
	}
}

// NodeIP is a node's InternalIP from its Node object: what its pods see as status.hostIP, and
// where it serves NodePort Services (nodeIP:nodePort, also from the laptop).
func (c *Cluster) NodeIP(node string) string {
	c.t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	c.t.Fatalf("node %s has no InternalIP: %v", node, n.Status.Addresses)
	return ""
}

// LoadBalancerIP waits until the LoadBalancer Service ns/name has an address
// (status.loadBalancer.ingress[0].ip, from the service proxy's pool: Env.LoadBalancerPool) and
// returns it.
func (c *Cluster) LoadBalancerIP(ns, name string, timeout time.Duration) string {
	c.t.Helper()
	var ip string
	c.Eventually(timeout, "a load-balancer address for Service "+ns+"/"+name, func() (bool, error) {
		svc, err := c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 && ing[0].IP != "" {
			ip = ing[0].IP
			return true, nil
		}
		return false, fmt.Errorf("status.loadBalancer is %+v", svc.Status.LoadBalancer)
	})
	return ip
}
