// Command e2e-up starts a harness cluster by hand, for debugging, and keeps it until SIGTERM or
// Ctrl-C (`make e2e-down` sends SIGTERM). It writes into -state (default /tmp/kaas-e2e-up):
//
//	kubeconfig   the admin kubeconfig
//	kubectl      a wrapper that runs kubectl inside the harness' network namespace
//	env          KUBECONFIG, KAAS_E2E_HARNESS_DIR=<harness dir>, KAAS_E2E_NETNS_PID=<pid>
//	pid          this process (outside the namespace)
//	ready        written last, once the cluster is up
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"kaas/e2e/harness"
)

func main() {
	state := flag.String("state", "/tmp/kaas-e2e-up", "where to write kubeconfig, kubectl wrapper and pid")
	nodes := flag.Int("nodes", 1, "number of process kubelets")
	volumes := flag.String("volumes", "shared", "comma-separated RWX PersistentVolumes to pre-create")
	flag.Parse()

	if !harness.InNetns() {
		if err := os.MkdirAll(*state, 0o755); err != nil {
			fail(err)
		}
		_ = os.Remove(filepath.Join(*state, "ready"))
		write(*state, "pid", fmt.Sprintf("%d\n", os.Getpid()))
	}
	code, err := harness.EnterNetns()
	if err != nil {
		fail(err)
	}
	if code >= 0 {
		os.Exit(code)
	}

	env, err := harness.Launch(harness.Options{Nodes: *nodes, Volumes: strings.Split(*volumes, ",")})
	if err != nil {
		if env != nil {
			env.DumpLogs(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
			env.Stop()
		}
		fail(err)
	}
	// Outside the namespace, only /proc/<pid>/ns/net of a process inside it leads in.
	pid := os.Getpid()
	write(*state, "kubeconfig", mustRead(env.Kubeconfig))
	write(*state, "kubectl", fmt.Sprintf("#!/bin/sh\nexec nsenter --net=/proc/%d/ns/net -- %s --kubeconfig %s \"$@\"\n",
		pid, env.KubectlBinary(), env.Kubeconfig))
	_ = os.Chmod(filepath.Join(*state, "kubectl"), 0o755)
	write(*state, "env", fmt.Sprintf("KUBECONFIG=%s\nKAAS_E2E_HARNESS_DIR=%s\nKAAS_E2E_NETNS_PID=%d\n", env.Kubeconfig, env.Dir, pid))
	write(*state, "ready", "ready\n")
	fmt.Printf("harness up: dir %s\nkubeconfig: %s\nkubectl:    %s/kubectl get pods -A\nshell:      nsenter --net=/proc/%d/ns/net --mount=/proc/%d/ns/mnt -- bash   (then KUBECONFIG=%s; cluster DNS resolves there)\n",
		env.Dir, env.Kubeconfig, *state, pid, pid, env.Kubeconfig)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	fmt.Println("stopping harness")
	env.Stop()
	for _, f := range []string{"ready", "kubectl", "kubeconfig", "env"} {
		_ = os.Remove(filepath.Join(*state, f))
	}
}

func write(dir, name, content string) {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		fail(err)
	}
}

func mustRead(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	return string(b)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "e2e-up:", err)
	os.Exit(1)
}
