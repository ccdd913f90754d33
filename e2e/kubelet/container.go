package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Restart back-off: doubles from backoffMin to backoffMax and resets after a run of
// backoffReset. Shorter than the kubelet's 10s..5min so that crash tests finish quickly.
const (
	backoffMin   = time.Second
	backoffMax   = 10 * time.Second
	backoffReset = 10 * time.Second
	// How long a failed pull shows as ErrImagePull before ImagePullBackOff.
	pullErrorShown = time.Second
)

// container is one container of a pod and its current process. Fields are guarded by w.mu.
type container struct {
	w    *podWorker
	spec *corev1.Container
	init bool

	bin          string       // resolved image binary (or HostImage), "" for a pulled image
	image        *pulledImage // the pulled image the current process runs from
	pid          int
	startedAt    time.Time
	running      bool
	started      bool // startup probe passed (or none)
	ready        bool
	restartCount int32
	waiting      *corev1.ContainerStateWaiting
	terminated   *corev1.ContainerStateTerminated // current state, when stopped for good
	lastTerm     *corev1.ContainerStateTerminated
	exited       chan struct{} // closed when the current process has exited
	// Offsets in the container's log file where the current and the previous run begin and
	// end (the kubelet's own "--- kubelet:" lines lie outside them); logEnd is -1 while the
	// current run is running.
	logStart, prevLogStart int64
	logEnd, prevLogEnd     int64
}

func newContainer(w *podWorker, spec *corev1.Container, init bool) *container {
	return &container{w: w, spec: spec, init: init,
		waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
}

// supervise runs the container until it should not run any more, honouring restartPolicy; for
// an init container, it reports whether it completed successfully.
func (c *container) supervise(ctx context.Context) bool {
	w := c.w
	backoff := backoffMin
	policy := w.pod.Spec.RestartPolicy
	for ran := false; ; {
		if ran {
			// restartCount counts runs after the first, not failed attempts to start one.
			w.mu.Lock()
			c.restartCount++
			w.mu.Unlock()
		}
		start := time.Now()
		exited, err := c.start(ctx)
		if err != nil {
			w.logf("container %s: %v", c.spec.Name, err)
			reason := "RunContainerError"
			if se, ok := err.(startError); ok {
				reason = se.reason
			}
			c.setWaiting(reason, err.Error())
			if reason == "ErrImagePull" {
				// As the kubelet: the failed pull shows as ErrImagePull, then as ImagePullBackOff
				// until the next attempt.
				select {
				case <-time.After(pullErrorShown):
				case <-w.terminate:
					c.finish()
					return false
				case <-ctx.Done():
					return false
				}
				c.setWaiting("ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %v", c.spec.Image, err))
			}
		} else {
			ran = true
			probeCtx, cancel := context.WithCancel(ctx)
			go c.probe(probeCtx)
			select {
			case <-exited:
			case <-w.terminate:
				c.kill(w.terminationGrace(), exited)
			}
			cancel()
			code := c.recordExit()
			if w.terminating() {
				c.finish()
				return false
			}
			success := code == 0
			if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && success) ||
				(c.init && success) {
				c.finish()
				return success
			}
			if time.Since(start) >= backoffReset {
				backoff = backoffMin
			}
			c.setWaiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container", backoff))
		}
		select {
		case <-time.After(backoff):
		case <-w.terminate:
			c.finish()
			return false
		case <-ctx.Done():
			return false
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// start launches the container's process through pod-init and returns a channel closed at exit.
// An image in the harness' table runs as that binary on a replica of the host's root; any other
// image is pulled (imagePullPolicy) and run from its own root filesystem.
func (c *container) start(ctx context.Context) (<-chan struct{}, error) {
	w := c.w
	bin, err := w.k.images.resolve(c.spec.Image)
	var img *pulledImage
	if err != nil {
		if w.k.store == nil {
			return nil, startError{"ErrImagePull", err}
		}
		bin = ""
		img, err = w.k.store.ensure(ctx, c.spec.Image, c.spec.ImagePullPolicy)
		if err != nil {
			reason := "ErrImagePull"
			if pe, ok := err.(*pullError); ok {
				reason = pe.reason
			}
			return nil, startError{reason, err}
		}
	}
	base := []string{"PATH=" + envOr("PATH", defaultPath), "HOME=/root"}
	if img != nil {
		base = img.Config.Env
	}
	env, err := w.containerEnv(ctx, c.spec, base)
	if err != nil {
		return nil, startError{"CreateContainerConfigError", err}
	}
	lookup := envLookup(env)
	var command, args []string
	for _, s := range c.spec.Command {
		command = append(command, expand(s, lookup))
	}
	for _, s := range c.spec.Args {
		args = append(args, expand(s, lookup))
	}
	w.mu.Lock()
	vols := w.vols
	w.mu.Unlock()
	mounts, err := w.mounts(c.spec, vols, env)
	if err != nil {
		return nil, err
	}
	hosts, err := w.writeHosts()
	if err != nil {
		return nil, err
	}
	mounts = append(mounts, mount{Source: hosts, Target: "/etc/hosts", ReadOnly: true})
	resolv, err := w.writeResolvConf()
	if err != nil {
		return nil, err
	}
	mounts = append(mounts, mount{Source: resolv, Target: "/etc/resolv.conf"})
	w.mu.Lock()
	ip := w.ip
	w.mu.Unlock()
	spec := initSpec{Hostname: podHostname(w.pod), Mounts: mounts, Dir: c.spec.WorkingDir,
		Argv: argv(bin, command, args), Env: env, Netns: w.netns(ip)}
	if img != nil {
		if spec.Image, spec.Env, err = c.imageRoot(img, env); err != nil {
			return nil, startError{"CreateContainerConfigError", err}
		}
		spec.Argv = containerArgv(img.Config, command, args)
		if spec.Dir == "" {
			spec.Dir = img.Config.WorkingDir
		}
		if spec.Dir == "" {
			spec.Dir = "/"
		}
	}
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("no command to run")
	}
	if spec.Dir == "" {
		spec.Dir = w.dir
	}
	// A fresh root per start: the previous process' namespace (and its mounts) died with it.
	spec.Root = filepath.Join(w.dir, "rootfs", c.spec.Name)
	spec.Scratch = filepath.Join(w.dir, "shadow", c.spec.Name)
	if err := os.MkdirAll(spec.Root, 0o755); err != nil {
		return nil, err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(w.logDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(w.logDir, c.spec.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(w.k.self, PodInitArg)
	cmd.Env = []string{envPodInit + "=" + string(specJSON)}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: fault injection and termination signal the whole container.
		Setpgid: true,
		// A killed kubelet takes its pods with it, like a crashed node.
		Pdeathsig:    syscall.SIGKILL,
		Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
	}
	w.mu.Lock()
	restarts := c.restartCount
	w.mu.Unlock()
	fmt.Fprintf(logf, "--- kubelet: starting container %s (restart %d): %q\n", c.spec.Name, restarts, spec.Argv)
	offset, _ := logf.Seek(0, io.SeekEnd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan struct{})
	w.mu.Lock()
	c.bin, c.pid, c.startedAt, c.running, c.waiting = bin, cmd.Process.Pid, time.Now(), true, nil
	c.image = img
	c.started = c.spec.StartupProbe == nil
	c.ready = false
	c.prevLogStart, c.logStart = c.logStart, offset
	c.prevLogEnd, c.logEnd = c.logEnd, -1
	c.exited = exited
	w.mu.Unlock()
	w.logf("container %s started, pid %d", c.spec.Name, cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		end, _ := logf.Seek(0, io.SeekEnd)
		fmt.Fprintf(logf, "--- kubelet: container %s exited: %s\n", c.spec.Name, cmd.ProcessState)
		logf.Close()
		w.mu.Lock()
		c.logEnd = end
		c.lastTerm = terminatedState(cmd.ProcessState, c.startedAt, c.pid)
		w.mu.Unlock()
		close(exited)
	}()
	w.markDirty()
	return exited, nil
}

// startError carries the waiting reason a failed start shows in the container status.
type startError struct {
	reason string
	err    error
}

func (e startError) Error() string { return e.err.Error() }

// kill sends SIGTERM to the container's process group, waits up to grace, then SIGKILLs it.
func (c *container) kill(grace time.Duration, exited <-chan struct{}) {
	c.w.mu.Lock()
	pid := c.pid
	c.w.mu.Unlock()
	if grace > 0 {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-exited:
			return
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
}

// recordExit moves the exited process into lastTerm and returns its exit code.
func (c *container) recordExit() int32 {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c.running, c.ready, c.started = false, false, false
	w.markDirty()
	return c.lastTerm.ExitCode
}

// finish marks the container stopped for good: its last termination becomes its state.
func (c *container) finish() {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.lastTerm != nil {
		c.terminated, c.waiting = c.lastTerm, nil
		c.lastTerm = nil
	}
	w.markDirty()
}

func (c *container) setWaiting(reason, msg string) {
	c.w.mu.Lock()
	c.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	c.w.mu.Unlock()
	c.w.markDirty()
}

// terminationGrace is the deletion grace period, or for a liveness kill the pod's
// terminationGracePeriodSeconds.
func (w *podWorker) terminationGrace() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.grace
}

func terminatedState(ps *os.ProcessState, startedAt time.Time, pid int) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{
		StartedAt:   metav1.NewTime(startedAt),
		FinishedAt:  metav1.Now(),
		ContainerID: containerID(pid),
		Reason:      "Completed",
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Signal = int32(ws.Signal())
		t.ExitCode = 128 + int32(ws.Signal())
	} else {
		t.ExitCode = int32(ps.ExitCode())
	}
	if t.ExitCode != 0 {
		t.Reason = "Error"
	}
	return t
}

// containerID is "process://<pid>": the harness reads the PID back from the pod's status.
func containerID(pid int) string { return fmt.Sprintf("process://%d", pid) }

func envLookup(env []string) func(string) (string, bool) {
	m := map[string]string{}
	for _, kv := range env {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				m[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// writeHosts writes the pod's /etc/hosts as the kubelet manages it (the pod's own name and
// address), plus the in-cluster names of the apiserver at its real address: outside the
// harness' network namespace there is neither cluster DNS nor a service proxy, and clients that
// reach the apiserver as kubernetes.default.svc still find it.
func (w *podWorker) writeHosts() (string, error) {
	p := w.pod
	name := podHostname(p)
	if p.Spec.Subdomain != "" {
		name = fmt.Sprintf("%s.%s.%s.svc.cluster.local %s", name, p.Spec.Subdomain, p.Namespace, name)
	}
	text := fmt.Sprintf("# Kubernetes-managed hosts file (process kubelet).\n127.0.0.1\tlocalhost\n"+
		"::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n"+
		"%s\tkubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.cluster.local\n",
		w.ip, name, w.k.cfg.APIServerHost)
	path := filepath.Join(w.dir, "etc-hosts")
	return path, os.WriteFile(path, []byte(text), 0o644)
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// imageRoot works out how a container runs from a pulled image: its user (the image's USER,
// overridden by runAsUser/runAsGroup of the container's or the pod's securityContext, checked
// against runAsNonRoot as the kubelet checks it), its groups (supplementalGroups, fsGroup), HOME
// when neither the image nor the pod sets it, and a fresh writable layer for this run.
func (c *container) imageRoot(img *pulledImage, env []string) (*imageRoot, []string, error) {
	var runAsUser, runAsGroup *int64
	var nonRoot *bool
	var groups []int
	if sc := c.w.pod.Spec.SecurityContext; sc != nil {
		runAsUser, runAsGroup, nonRoot = sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot
		for _, g := range sc.SupplementalGroups {
			groups = append(groups, int(g))
		}
		if sc.FSGroup != nil {
			groups = append(groups, int(*sc.FSGroup))
		}
	}
	if sc := c.spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			runAsUser = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			runAsGroup = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	if nonRoot != nil && *nonRoot && runAsUser == nil {
		u, _, _ := strings.Cut(img.Config.User, ":")
		if _, err := strconv.Atoi(u); u != "" && err != nil {
			return nil, nil, fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", u)
		}
	}
	uid, gid, home, err := imageUser(img.RootFS, img.Config.User, runAsUser, runAsGroup)
	if err != nil {
		return nil, nil, err
	}
	if nonRoot != nil && *nonRoot && uid == 0 {
		return nil, nil, fmt.Errorf("container has runAsNonRoot and image will run as root")
	}
	if _, ok := envLookup(env)("HOME"); !ok {
		env = append(env, "HOME="+home)
	}
	dir := filepath.Join(c.w.dir, "overlay", c.spec.Name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	readOnly := c.spec.SecurityContext != nil && c.spec.SecurityContext.ReadOnlyRootFilesystem != nil && *c.spec.SecurityContext.ReadOnlyRootFilesystem
	return &imageRoot{RootFS: img.RootFS, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"),
		UID: uid, GID: gid, Groups: append([]int{}, groups...), ReadOnly: readOnly}, env, nil
}

// baseEnv is the environment the container's spec is applied on (see containerEnv).
func (c *container) baseEnv() []string {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.image != nil {
		return c.image.Config.Env
	}
	return []string{"PATH=" + envOr("PATH", defaultPath), "HOME=/root"}
}
