package harness

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
)

// Environment variables that carry state from the outer process (host network namespace, where
// `go build` can reach the module proxy) into the re-executed inner one.
const (
	envInNetns = "KAAS_E2E_IN_NETNS" // "1" inside the private network namespace
	envK8sBin  = "KAAS_E2E_K8S_BIN"  // dir with kube-apiserver, kubectl, ...
	envEtcdBin = "KAAS_E2E_ETCD_BIN" // dir with etcd
	envTools   = "KAAS_E2E_TOOLS"    // dir with process-kubelet and testpod
	// envNetns=0 opts out of the private network namespace (pods then get 127.x addresses,
	// which the apiserver refuses in EndpointSlices).
	envNetns = "KAAS_E2E_NETNS"
)

// Main is TestMain for e2e packages:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
// It builds (or finds cached) binaries, then re-runs the test binary inside a private network
// namespace (and mount namespace, where /etc/resolv.conf names the cluster DNS: see dns.go). Why: the apiserver refuses loopback addresses in EndpointSlices, so pods need
// routable-looking addresses; inside a namespace that has nothing but its own `lo`, addresses
// such as 10.100.1.5 can be put on `lo` and no packet can ever leave the machine. A second
// harness run never collides with this one's ports or addresses either.
func Main(m *testing.M) {
	code, err := EnterNetns()
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(2)
	}
	if code >= 0 {
		os.Exit(code)
	}
	stopOnSignal()
	code = m.Run()
	atExit.Lock()
	for _, f := range atExit.funcs {
		f()
	}
	atExit.Unlock()
	os.Exit(code)
}

// atExit is what AtExit registered.
var atExit struct {
	sync.Mutex
	funcs []func()
}

// AtExit runs f when the package's tests have all run (Main's caller only): for what a whole
// test process shares, such as built images, which no single test's cleanup may remove.
func AtExit(f func()) {
	atExit.Lock()
	defer atExit.Unlock()
	atExit.funcs = append(atExit.funcs, f)
}

// live is every harness of this process that has not been stopped, for stopOnSignal.
var live = struct {
	sync.Mutex
	envs map[*Env]bool
}{envs: map[*Env]bool{}}

// stopOnSignal tears down every live harness on Ctrl-C or SIGTERM before exiting: the testing
// package runs no t.Cleanup then, and the harness directory would be left behind.
func stopOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		live.Lock()
		envs := make([]*Env, 0, len(live.envs))
		for e := range live.envs {
			envs = append(envs, e)
		}
		live.Unlock()
		fmt.Fprintf(os.Stderr, "harness: %v, stopping %d cluster(s)\n", s, len(envs))
		for _, e := range envs {
			e.Stop()
		}
		os.Exit(130)
	}()
}

// EnterNetns prepares binaries and re-executes the current program in a new network namespace.
// It returns the child's exit code, or -1 when the caller is already the process that should
// run (inside the namespace, or with namespaces disabled).
func EnterNetns() (int, error) {
	if os.Getenv(envInNetns) == "1" {
		return -1, setupNetns()
	}
	if err := prepareBinaries(); err != nil {
		return 0, err
	}
	if os.Getenv(envNetns) == "0" || os.Geteuid() != 0 {
		return -1, nil
	}
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envInNetns+"=1")
	// A mount namespace too, whose / Go makes private: the cluster's resolv.conf covers
	// /etc/resolv.conf there (setupProcessDNS), and mounts made inside leave with the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("re-exec in a new network namespace: %w", err)
	}
	// Pass Ctrl-C and `kill` on to the inner process so that its cleanups run.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		if ee.ExitCode() < 0 {
			return 1, nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

// InNetns reports whether this process runs in the harness' private network namespace.
func InNetns() bool { return os.Getenv(envInNetns) == "1" }

// setupNetns brings up `lo` in the fresh namespace (it starts down, without even 127.0.0.1) and
// points the process' resolver at the cluster DNS.
func setupNetns() error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return setupProcessDNS()
}

// addLoopbackAddr puts ip on `lo`; used for node and pod addresses inside the namespace.
func addLoopbackAddr(ip string) error {
	out, err := exec.Command("ip", "addr", "replace", ip+"/32", "dev", "lo").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip addr replace %s/32 dev lo: %v: %s", ip, err, out)
	}
	return nil
}
