package scenarios

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nfs is a running kaas-nfsfs: one backing directory (the export), one mount per node.
type nfs struct {
	cmd     *exec.Cmd
	control string
	mounts  map[string]string // node → mount point
	logs    *os.File
}

// startNFS serves backing through one mount per node under dir; stopped at test cleanup.
func startNFS(t testing.TB, bin, backing, dir string, nodes []string) *nfs {
	t.Helper()
	n := &nfs{control: filepath.Join(dir, "nfsfs.sock"), mounts: map[string]string{}}
	args := []string{"--backing", backing, "--control", n.control}
	for _, node := range nodes {
		mnt := filepath.Join(dir, "mnt", node)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		n.mounts[node] = mnt
		args = append(args, "--mount", node+"="+mnt)
	}
	logs, err := os.Create(filepath.Join(dir, "nfsfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	n.logs = logs
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stderr = logs
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start kaas-nfsfs: %v", err)
	}
	ready := make(chan bool, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if strings.Contains(scanner.Text(), "kaas-nfsfs ready") {
				ready <- true
			}
		}
		ready <- false
	}()
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- n.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = n.cmd.Process.Kill()
			<-done
		}
		for _, mnt := range n.mounts {
			// A mount still busy at exit was detached lazily; make sure nothing is left.
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
			for _, mnt := range n.mounts {
				if strings.Contains(string(mounts), " "+mnt+" ") {
					t.Errorf("%s is still mounted after kaas-nfsfs stopped", mnt)
				}
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("===== kaas-nfsfs log =====\n%s", tail(string(b), 200))
		}
		logs.Close()
	})
	select {
	case ok := <-ready:
		if !ok {
			b, _ := os.ReadFile(logs.Name())
			t.Fatalf("kaas-nfsfs exited before it was ready:\n%s", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kaas-nfsfs not ready after 30s")
	}
	return n
}

// do sends one control command and returns the answer (an error for "err ...").
func (n *nfs) do(command string) (string, error) {
	conn, err := net.DialTimeout("unix", n.control, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(conn, command); err != nil {
		return "", err
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	answer = strings.TrimSpace(answer)
	if err != nil {
		return answer, err
	}
	if strings.HasPrefix(answer, "err") {
		return answer, fmt.Errorf("kaas-nfsfs %q: %s", command, answer)
	}
	return answer, nil
}

// ghosts lists the .nfs* files under the backing directory's dir (the server's view).
func ghosts(backing string) []string {
	var found []string
	_ = filepath.Walk(backing, func(path string, info os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(info.Name(), ".nfs") {
			found = append(found, strings.TrimPrefix(path, backing))
		}
		return nil
	})
	return found
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
