// Command testpod is the harness self-test's container program: it prints its environment and
// the files under the directories it is told to show, serves /healthz on its pod address (over
// TLS with --tls-cert and --tls-key), and logs the signals it gets, so that tests can check what
// the process kubelet gave it.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to serve on (default $POD_IP:8080)")
	show := flag.String("show", "", "comma-separated directories whose files to print")
	drain := flag.Duration("drain", time.Second, "how long to keep serving after SIGTERM")
	apiCheck := flag.Bool("api-check", false, "ask the apiserver who we are, with the in-cluster service-account credentials")
	tlsCert := flag.String("tls-cert", "", "serve HTTPS with this PEM certificate (chain) file, and --tls-key")
	tlsKey := flag.String("tls-key", "", "the PEM private key of --tls-cert")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetOutput(os.Stdout)

	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		fmt.Println("env:", kv)
	}
	host, _ := os.Hostname()
	fmt.Println("hostname:", host)
	for _, dir := range strings.Split(*show, ",") {
		if dir != "" {
			printFiles(dir)
		}
	}
	if *apiCheck {
		fmt.Println("api-check:", whoAmI())
	}

	addr := *listen
	if addr == "" {
		addr = net.JoinHostPort(os.Getenv("POD_IP"), "8080")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, os.Getenv("POD_NAME"))
	})
	srv := &http.Server{Addr: addr, Handler: mux}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatalf("listen %s: %v", addr, err)
	}
	if *tlsCert != "" {
		log.Printf("serving HTTPS on %s", l.Addr())
		go func() { log.Print(srv.ServeTLS(l, *tlsCert, *tlsKey)) }()
	} else {
		log.Printf("serving on %s", l.Addr())
		go func() { _ = srv.Serve(l) }()
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	s := <-sigs
	log.Printf("got %s, draining for %s", sigName(s), *drain)
	time.Sleep(*drain)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	log.Printf("exiting after %s", sigName(s))
}

func sigName(s os.Signal) string {
	if s == syscall.SIGTERM {
		return "SIGTERM"
	}
	return s.String()
}

// printFiles prints each regular file under dir (or dir itself if it is a file); a file of more
// than 400 bytes (a token, a certificate) is cut to its first 80.
func printFiles(dir string) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Printf("file: %s: error %v\n", path, err)
			return nil
		}
		if d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Printf("file: %s: error %v\n", path, err)
			return nil
		}
		s := string(data)
		if len(s) > 400 {
			s = s[:80] + "..."
		}
		fmt.Printf("file: %s: %q\n", path, s)
		return nil
	})
}

// whoAmI does what an in-cluster client does: read the projected token and CA from the standard
// path, dial KUBERNETES_SERVICE_HOST:PORT, and POST a SelfSubjectReview; it returns the user name.
func whoAmI() string {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return "error: " + err.Error()
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return "error: " + err.Error()
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")) +
		"/apis/authentication.k8s.io/v1/selfsubjectreviews"
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != 201 {
		return fmt.Sprintf("error: HTTP %d %v", resp.StatusCode, err)
	}
	return "user=" + review.Status.UserInfo.Username
}
