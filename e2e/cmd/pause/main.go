// Command pause is the sandbox ("pause") container of the real-kubelet test
// (images/realkubelet_test.go): it holds the pod's namespaces and does nothing until SIGTERM or
// SIGINT, like registry.k8s.io/pause. It uses no package that needs cgo, so it links statically
// and its image is the binary alone.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
}
