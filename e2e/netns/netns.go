// Package netns works in another network namespace from a Go program, which is many threads:
// setns(2) moves only the calling thread, so the work runs on a locked thread. The kubelet dials
// localhost in a pod with it (kubectl port-forward); the harness' laptop dials from outside the
// cluster with it.
package netns

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dial connects to addr from inside the network namespace at path (/run/netns/<name>,
// /proc/<pid>/ns/net). The socket is made in that namespace and stays there, whatever thread
// uses it later. addr must be an IP address and port: a name would be resolved by goroutines on
// other threads, in the caller's namespace.
//
// The dial runs on a locked thread that is moved back to its own namespace before it is
// unlocked. It must never be left to die locked (Go ends such a thread): a child process started
// from that thread with a parent-death signal (the kubelet's containers, the harness' processes)
// would get it, SIGKILL.
func Dial(ctx context.Context, path, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open this thread's network namespace: %w", err)}
			return
		}
		defer unix.Close(home)
		if err := Enter(path); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked in the other namespace and ends with this goroutine
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// Enter moves the calling thread into the network namespace at path; the caller has locked it
// (runtime.LockOSThread) and either moves it back or execs from it.
func Enter(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", path, err)
	}
	return nil
}
