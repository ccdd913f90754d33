// Command process-kubelet is the e2e harness' kubelet: it registers a Node and runs the pods
// bound to it as local processes. Re-executed as `process-kubelet pod-init`, it is the first
// process of a container (see kubelet.PodInit).
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"kaas/e2e/kubelet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == kubelet.PodInitArg {
		kubelet.PodInit()
		return
	}
	var cfg kubelet.Config
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig with the node's identity (system:node:<name>)")
	flag.StringVar(&cfg.NodeName, "node-name", "", "name of the Node to register")
	flag.StringVar(&cfg.NodeIP, "node-ip", "127.0.0.1", "the node's InternalIP (status.hostIP)")
	flag.StringVar(&cfg.PodPrefix, "pod-prefix", "127.0.100", "pods get <prefix>.2 .. <prefix>.254")
	flag.BoolVar(&cfg.AddAddresses, "add-addresses", false, "add each pod address to lo (needs a private netns)")
	flag.StringVar(&cfg.RootDir, "root-dir", "", "per-pod scratch directories")
	flag.StringVar(&cfg.LogDir, "log-dir", "", "per-pod container logs")
	flag.StringVar(&cfg.ImagesFile, "images", "", "JSON image→binary table")
	flag.StringVar(&cfg.ImageDir, "image-dir", "", "pulled, unpacked images (default <root-dir>/images)")
	mirrors := flag.String("registry-mirrors", "", "registry=host:port,... pull that registry's images from host:port instead")
	flag.StringVar(&cfg.PathMapFile, "path-map", "", "JSON {PV host path prefix: this node's path}, re-read per pod")
	flag.StringVar(&cfg.APIServerHost, "apiserver-host", "127.0.0.1", "KUBERNETES_SERVICE_HOST for pods")
	flag.IntVar(&cfg.APIServerPort, "apiserver-port", 6443, "KUBERNETES_SERVICE_PORT for pods")
	flag.StringVar(&cfg.KubeletVersion, "kubelet-version", "v0.0.0-process", "reported in node status")
	clusterDNS := flag.String("cluster-dns", "", "comma-separated nameservers of pods with dnsPolicy ClusterFirst")
	flag.StringVar(&cfg.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	flag.StringVar(&cfg.ResolvConf, "resolv-conf", "/etc/resolv.conf", "the node's resolv.conf (dnsPolicy Default)")
	flag.DurationVar(&cfg.VolumeResync, "volume-resync", kubelet.DefaultVolumeResync,
		"how often running pods' configMap/secret volumes are refreshed from the apiserver (a real kubelet: ~60-90s; negative: never)")
	flag.Parse()
	for _, ns := range strings.Split(*clusterDNS, ",") {
		if ns != "" {
			cfg.ClusterDNS = append(cfg.ClusterDNS, ns)
		}
	}
	cfg.Mirrors = map[string]string{}
	for _, m := range strings.Split(*mirrors, ",") {
		if from, to, ok := strings.Cut(m, "="); ok {
			cfg.Mirrors[from] = to
		}
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := kubelet.Run(ctx, cfg); err != nil {
		log.Fatalf("process-kubelet: %v", err)
	}
}
