package images

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kaas/e2e/harness"
	"kaas/e2e/imagebuild"
)

// realNode is a real kubelet (built from the Kubernetes module the harness pins) with
// containerd (Debian's), joined to a harness cluster as one more node. Both run in the harness'
// network namespace, each in a mount namespace of its own: what they would change on the
// machine (global sysctls, /run/containerd, /var/lib/cni, /var/log/containers) is covered there
// by files and tmpfs mounts of their own. Every process they start (shims, containers) is in the
// cgroup tree named by cgroup, which teardown empties and removes. See e2e/README.md, "A real
// kubelet with containerd".
type realNode struct {
	name, ip, podCIDR string
	dir               string // all files: containerd's root and state, the kubelet's root, logs
	cgroup            string // realNodePrefix+<pid>: the kubelet's cgroupRoot, containerd's pids cgroup
	containerd        *exec.Cmd
	kubelet           *exec.Cmd
	exited            map[*exec.Cmd]chan struct{}
}

// kubeletSysctls are the global sysctls the kubelet sets (setupKernelTunables); its mount
// namespace covers each with a file.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// v1Hierarchies are the cgroup v1 hierarchies mounted.
func v1Hierarchies(t *testing.T) []string {
	t.Helper()
	out := cgroupMounts("cgroup")
	if len(out) == 0 {
		// Debian 12's default on a host with systemd is cgroup v2 alone. The cgroup handling
		// here (cgroupRoot in each hierarchy, the pids hierarchy for containerd, memory.limit_in_bytes)
		// is v1's, the only one this machine has: the v2 leg is not written, as it could not be tried.
		t.Skip("no cgroup v1 hierarchy is mounted: the real-kubelet leg is written for cgroup v1 only (e2e/README.md)")
	}
	return out
}

// cgroupMounts are the mount points of the cgroup file systems of the given types ("cgroup" for
// v1, "cgroup2" for v2, also the "unified" hierarchy of a hybrid setup, where the kubelet makes
// its cgroup root too).
func cgroupMounts(types ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// "36 25 0:31 / /sys/fs/cgroup/memory rw,... - cgroup cgroup rw,memory"
		l := s.Text()
		i := strings.Index(l, " - ")
		if i < 0 {
			continue
		}
		if fields, rest := strings.Fields(l[:i]), strings.Fields(l[i+3:]); len(fields) > 4 && len(rest) > 0 && slices.Contains(types, rest[0]) {
			out = append(out, fields[4])
		}
	}
	return out
}

// startRealNode starts containerd and a kubelet as node name, with the node address ip on the
// namespace's lo and pods on a CNI bridge in podCIDR (a /24); the caller waits for the node to
// be Ready. The image pause (registry.k8s.io/pause:3.6, containerd's sandbox image, built from
// cmd/pause) goes into the harness registry, which serves registry.k8s.io and mirrors (the
// harness' Options.Mirrors) to containerd over plain HTTP. Teardown is registered with t.Cleanup
// and the harness' OnStop.
func startRealNode(t *testing.T, c *harness.Cluster, name, ip, podCIDR string, mirrors []string) *realNode {
	t.Helper()
	hierarchies := v1Hierarchies(t)
	kubeletBin := filepath.Join(filepath.Dir(c.KubectlBinary()), "kubelet")
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "unshare", "ip", kubeletBin, "/usr/lib/cni/bridge", "/usr/lib/cni/host-local"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("the real-kubelet leg needs %s (Debian: containerd runc containernetworking-plugins; scripts/install-deps.sh installs them; the kubelet comes from e2e/hack/bins.sh): %v", bin, err)
		}
	}
	sweepDead(t)
	cgroup := fmt.Sprintf("%s%d", realNodePrefix, os.Getpid())
	dir, err := os.MkdirTemp("", cgroup+"-")
	if err != nil {
		t.Fatal(err)
	}
	n := &realNode{name: name, ip: ip, podCIDR: podCIDR, dir: dir, cgroup: cgroup,
		exited: map[*exec.Cmd]chan struct{}{}}
	// Torn down by the test's cleanup, or by the harness' Stop on Ctrl-C or SIGTERM, when no
	// cleanup runs (and the shims and containers would outlive the test process).
	var once sync.Once
	teardown := func(errorf func(format string, args ...any)) { once.Do(func() { n.stop(c.Env, errorf) }) }
	c.OnStop(func() {
		teardown(func(format string, args ...any) { fmt.Fprintf(os.Stderr, "real node: "+format+"\n", args...) })
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"containerd", "kubelet"} {
				if b, err := os.ReadFile(filepath.Join(n.dir, name+".log")); err == nil {
					t.Logf("===== real node %s.log (last 100 lines) =====\n%s", name, lastLines(string(b), 100))
				}
			}
		}
		teardown(t.Errorf)
		if os.Getenv("KAAS_E2E_KEEP") == "1" {
			t.Logf("KAAS_E2E_KEEP=1, leaving %s", n.dir)
		}
	})

	for _, h := range hierarchies {
		cg := filepath.Join(h, n.cgroup)
		if err := os.Mkdir(cg, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		// A new cpuset has no CPUs and no memory nodes until it is given its parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(cg, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	pidsCgroup := ""
	for _, h := range hierarchies {
		if filepath.Base(h) == "pids" {
			pidsCgroup = filepath.Join(h, n.cgroup, "containerd")
		}
	}
	if pidsCgroup == "" {
		t.Fatal("no pids cgroup hierarchy to keep containerd's shims in")
	}
	if err := os.Mkdir(pidsCgroup, 0o755); err != nil {
		t.Fatal(err)
	}

	if out, err := exec.Command("ip", "addr", "replace", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip addr: %v: %s", err, out)
	}
	n.pushPause(t, c)

	// containerd: its own root, state, socket, runc root and CNI state; registry hosts from
	// certs.d (config_path), plain HTTP to the harness registry.
	for _, d := range []string{"certs.d", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "sysctl"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range append([]string{"registry.k8s.io"}, mirrors...) {
		writeFile(t, filepath.Join(dir, "certs.d", m, "hosts.toml"), fmt.Sprintf(`server = "https://%s"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, m, c.Registry))
	}
	writeFile(t, filepath.Join(dir, "cni", "net.d", "10-kaas-e2e.conflist"), fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kaas-e2e",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`, podCIDR, filepath.Join(dir, "cni", "ipam")))
	sock := filepath.Join(dir, "containerd.sock")
	writeFile(t, filepath.Join(dir, "containerd.toml"), fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  # Without CAP_SYS_RESOURCE (missing from this machine's bounding set) runc cannot set the
  # CRI's -998 for the sandbox; this clamps it to containerd's own score.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = %[5]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[8]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, filepath.Join(dir, "opt"), ip,
		filepath.Join(dir, "runc"), filepath.Join(dir, "cni", "net.d"), filepath.Join(dir, "certs.d")))
	// `unshare -m`, not `ip netns exec` (which remounts /sys, and runc then finds no cgroup
	// mount). Propagation unchanged: the kubelet's Secret and token mounts under its shared
	// root directory reach containerd's namespace.
	kubeletRoot := filepath.Join(dir, "kubelet")
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("mount --bind %[1]s %[1]s && mount --make-shared %[1]s", kubeletRoot)).CombinedOutput(); err != nil {
		t.Fatalf("shared bind mount of the kubelet root: %v: %s", err, out)
	}
	n.containerd = n.start(t, "containerd", fmt.Sprintf(`set -e
echo $$ > %s/cgroup.procs
mount -t tmpfs tmpfs /run
mkdir -p /var/lib/cni && mount -t tmpfs tmpfs /var/lib/cni
exec containerd --config %s`, pidsCgroup, filepath.Join(dir, "containerd.toml")))
	n.eventually(t, c, 30*time.Second, "containerd serving "+sock, func() (bool, error) {
		_, err := os.Stat(sock)
		return err == nil, err
	})

	// The kubelet: a node client certificate, cgroupfs under its own cgroup root, the pod logs in
	// dir; the sysctls it sets, /var/log/containers (its symlinks) and /var/lib/kubelet (the
	// device plugin socket's fixed directory, whatever --root-dir says) covered in its namespace.
	kubeconfig, err := c.NodeKubeconfig(name)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "resolv.conf"), "nameserver "+c.DNS+"\n")
	writeFile(t, filepath.Join(dir, "kubelet.yaml"), fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]q}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /%[3]s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[4]s
podLogsDir: %[5]q
clusterDNS: [%[6]q]
clusterDomain: %[7]s
resolvConf: %[8]q
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
`, ip, c.Config.CAFile, n.cgroup, sock, filepath.Join(dir, "pod-logs"), c.DNS, harness.ClusterDomain,
		filepath.Join(dir, "resolv.conf")))
	var cover strings.Builder
	for _, s := range kubeletSysctls {
		f := filepath.Join(dir, "sysctl", strings.ReplaceAll(s, "/", "."))
		fmt.Fprintf(&cover, "if [ -f /proc/sys/%[1]s ]; then cat /proc/sys/%[1]s > %[2]s; mount --bind %[2]s /proc/sys/%[1]s; fi\n", s, f)
	}
	n.kubelet = n.start(t, "kubelet", fmt.Sprintf(`set -e
%s
if [ -d /var/log/containers ]; then mount -t tmpfs tmpfs /var/log/containers; else mount -t tmpfs tmpfs /var/log; fi
mkdir -p /var/lib/kubelet && mount -t tmpfs tmpfs /var/lib/kubelet
exec %s --config=%s --kubeconfig=%s --hostname-override=%s --node-ip=%s --root-dir=%s --node-labels=kaas.dev/e2e-runtime=containerd --v=2`,
		cover.String(), kubeletBin, filepath.Join(dir, "kubelet.yaml"), kubeconfig, name, ip, kubeletRoot))
	return n
}

// pushPause builds the sandbox image from cmd/pause and pushes it to the harness registry as
// pause:3.6, which registry.k8s.io/pause:3.6 resolves to through the mirror.
func (n *realNode) pushPause(t *testing.T, c *harness.Cluster) {
	t.Helper()
	img, err := imagebuild.Build(imagebuild.Spec{Binary: harness.PauseBinary(), Path: "/pause", Entrypoint: []string{"/pause"},
		Title: "pause", Version: "3.6", Revision: "e2e", Source: "kaas e2e"})
	if err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(n.dir, "pause-layout")
	if err := imagebuild.WriteLayout(layout, img, "registry.k8s.io/pause", []string{"3.6"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PushImage(layout, "pause"); err != nil {
		t.Fatal(err)
	}
}

// start runs script under `unshare -m --propagation unchanged` (its mounts stay in its own
// mount namespace), output to dir/<name>.log, in a process group of its own with a parent-death
// signal.
func (n *realNode) start(t *testing.T, name, script string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(filepath.Join(n.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "unchanged", "sh", "-c", script)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	n.exited[cmd] = done
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	return cmd
}

// eventually is c.Eventually that also fails as soon as containerd or the kubelet has exited.
func (n *realNode) eventually(t *testing.T, c *harness.Cluster, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	c.For(t).Eventually(timeout, what, func() (bool, error) {
		for cmd, done := range n.exited {
			select {
			case <-done:
				t.Fatalf("%s exited while waiting for %s: %v", filepath.Base(cmd.Args[len(cmd.Args)-1]), what, cmd.ProcessState)
			default:
			}
		}
		return cond()
	})
}

// stop tears the node down: its pods deleted through the API while the kubelet still runs, then
// the kubelet and containerd stopped, whatever is left in their cgroups killed (shims,
// containers), the mounts under dir removed, the cgroups and dir too (dir stays with
// KAAS_E2E_KEEP=1). It reports what it could not undo through errorf.
func (n *realNode) stop(c *harness.Env, errorf func(format string, args ...any)) {
	if n.kubelet != nil {
		if out, err := c.Kubectl("delete", "pods", "-A", "--field-selector", "spec.nodeName="+n.name, "--wait=true", "--timeout=60s"); err != nil {
			errorf("deleting the pods of %s: %v: %s", n.name, err, out)
		}
	}
	for _, cmd := range []*exec.Cmd{n.kubelet, n.containerd} {
		if cmd == nil {
			continue
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-n.exited[cmd]:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-n.exited[cmd]
		}
	}
	killAndRemove(n.cgroup, n.dir, errorf)
	_ = exec.Command("ip", "addr", "del", n.ip+"/32", "dev", "lo").Run()
	if os.Getenv("KAAS_E2E_KEEP") == "1" {
		return
	}
	if err := os.RemoveAll(n.dir); err != nil {
		errorf("remove %s: %v", n.dir, err)
	}
}

// killAndRemove kills what is left of a real node: the processes in the cgroup trees named
// cgroup (any hierarchy) and those whose command line names dir (a shim's -address), until
// none is left; then it unmounts what is mounted under dir in this mount namespace and removes
// the cgroup trees. It reports what it could not undo through errorf.
func killAndRemove(cgroup, dir string, errorf func(format string, args ...any)) {
	hierarchies := cgroupMounts("cgroup", "cgroup2")
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := leftoverPIDs(hierarchies, cgroup, dir)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			errorf("processes of the real node still running after SIGKILL: %v", pids)
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, mp := range mountsUnder(dir) {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
			errorf("umount %s: %v", mp, err)
		}
	}
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.Walk(filepath.Join(h, cgroup), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			// A cgroup whose last process just died can be busy for a moment.
			var err error
			for i := 0; i < 50; i++ {
				if err = os.Remove(d); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !os.IsNotExist(err) {
				errorf("rmdir %s: %v", d, err)
			}
		}
	}
}

// sweepDead removes what the real node of a test process that was killed outright (a -timeout
// panic, SIGKILL: no cleanup ran) left behind: its cgroup trees with their shims and containers,
// and its directory. Both are named after the test process' PID.
func sweepDead(t *testing.T) {
	t.Helper()
	dead := map[int]bool{}
	for _, h := range cgroupMounts("cgroup", "cgroup2") {
		cgs, _ := filepath.Glob(filepath.Join(h, realNodePrefix+"*"))
		for _, cg := range cgs {
			if pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(cg), realNodePrefix)); err == nil && !alive(pid) {
				dead[pid] = true
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), realNodePrefix+"*-*"))
	for _, d := range dirs {
		f := strings.SplitN(strings.TrimPrefix(filepath.Base(d), realNodePrefix), "-", 2)
		if pid, err := strconv.Atoi(f[0]); err == nil && !alive(pid) {
			dead[pid] = true
		}
	}
	for pid := range dead {
		t.Logf("removing the real node of test process %d, which is gone", pid)
		name := fmt.Sprintf("%s%d", realNodePrefix, pid)
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), name+"-*"))
		dir := filepath.Join(os.TempDir(), name+"-") // a prefix no command line of another node has
		killAndRemove(name, dir, t.Errorf)
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				t.Errorf("remove %s: %v", d, err)
			}
		}
	}
}

// realNodePrefix names a real node's cgroup trees (<prefix><pid>) and directory
// (<prefix><pid>-<random>) after the test process.
const realNodePrefix = "kaas-e2e-realnode-"

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// leftoverPIDs are the processes in the cgroup trees named cgroup (any hierarchy) and those
// whose command line names dir (a shim's -address), this process aside.
func leftoverPIDs(hierarchies []string, cgroup, dir string) []int {
	seen := map[int]bool{}
	for _, h := range hierarchies {
		_ = filepath.Walk(filepath.Join(h, cgroup), func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), dir) {
			seen[pid] = true
		}
	}
	delete(seen, os.Getpid())
	var out []int
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// mountsUnder lists this mount namespace's mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		// A mount point stacked twice is listed twice; the second umount gets EINVAL.
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
