package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// RegistryPort is the harness registry's port (on its own address, so a fixed port is free).
const RegistryPort = 5000

// startRegistry serves an OCI registry (go-containerregistry's pkg/registry, run by
// cmd/imagebuild) on a harness address: 10.<k>.0.2:5000 inside the network namespace, a free
// loopback port outside it. Blobs live in Dir/registry.
func (c *Env) startRegistry(ctx context.Context) error {
	host, port := "127.0.0.1", 0
	if InNetns() {
		host, port = c.subnet+".0.2", RegistryPort
		if err := addLoopbackAddr(host); err != nil {
			return err
		}
	} else {
		var err error
		if port, err = freePort(host); err != nil {
			return err
		}
	}
	addr := hostPort(host, port)
	p, err := startProc("registry", ImagebuildBinary(),
		[]string{"serve", "-listen", addr, "-dir", filepath.Join(c.Dir, "registry")}, nil, c.logPath("registry"))
	if err != nil {
		return err
	}
	c.addProc(p)
	err = poll(ctx, "registry", func() (bool, error) {
		if done, err := p.exited(); done {
			return false, fmt.Errorf("registry exited: %v (see %s)", err, p.log)
		}
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return err
	}
	c.Registry = addr
	return nil
}

// PushImage pushes every tag of the OCI layout in dir to repository repo ("kaas/kaas") of the
// harness registry, through the registry API (cmd/imagebuild push), and returns the references.
func (c *Env) PushImage(dir, repo string) ([]string, error) {
	if c.Registry == "" {
		return nil, fmt.Errorf("the harness has no registry (Options.Registry)")
	}
	start := time.Now()
	out, err := exec.Command(ImagebuildBinary(), "push", "-layout", dir, "-to", c.Registry+"/"+repo).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("push %s: %v: %s", dir, err, out)
	}
	var refs []string
	for _, l := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(l, "pushed "); ok {
			refs = append(refs, r)
		}
	}
	if f, err := os.OpenFile(c.logPath("registry"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
		fmt.Fprintf(f, "### pushed %s as %v in %s\n", dir, refs, time.Since(start).Round(time.Millisecond))
		f.Close()
	}
	return refs, nil
}

func (c *Env) pushImages(images map[string]string) error {
	dirs := make([]string, 0, len(images))
	for d := range images {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if _, err := c.PushImage(d, images[d]); err != nil {
			return err
		}
	}
	return nil
}

// ImagebuildBinary is cmd/imagebuild, built with the harness' tools.
func ImagebuildBinary() string { return filepath.Join(os.Getenv(envTools), "imagebuild") }
