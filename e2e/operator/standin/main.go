// Command standin is a stand-in for the kaas broker image in operator e2e tests, until the
// broker has a cluster mode: it serves /healthz and /readyz on KAAS_HTTP_LISTEN and accepts
// (and closes) connections on KAAS_LISTEN, and drains for a second on SIGTERM. It verifies the
// operator's StatefulSet wiring (env, ports, probes, volume), not broker behaviour.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	for _, k := range []string{"MY_POD_NAME", "KAAS_DATA_DIR", "KAAS_LISTEN", "KAAS_HTTP_LISTEN", "KAAS_ADVERTISE"} {
		if os.Getenv(k) == "" {
			fmt.Fprintf(os.Stderr, "standin: %s is not set\n", k)
			os.Exit(2)
		}
	}
	fmt.Printf("standin broker %s advertising %s, data in %s\n", os.Getenv("MY_POD_NAME"), os.Getenv("KAAS_ADVERTISE"), os.Getenv("KAAS_DATA_DIR"))
	if _, err := os.Stat(os.Getenv("KAAS_DATA_DIR")); err != nil {
		fmt.Fprintln(os.Stderr, "standin: data dir:", err)
		os.Exit(2)
	}
	kafka, err := net.Listen("tcp", os.Getenv("KAAS_LISTEN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(2)
	}
	go func() {
		for {
			c, err := kafka.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	go func() {
		if err := http.ListenAndServe(os.Getenv("KAAS_HTTP_LISTEN"), mux); err != nil {
			fmt.Fprintln(os.Stderr, "standin:", err)
			os.Exit(2)
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	fmt.Println("standin: draining")
	time.Sleep(time.Second)
}
