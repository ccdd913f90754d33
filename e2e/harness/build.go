package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// moduleDir finds the e2e module's root: KAAS_E2E_DIR, else the source location of this file.
func moduleDir() (string, error) {
	if d := os.Getenv("KAAS_E2E_DIR"); d != "" {
		return d, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", fmt.Errorf("cannot locate the e2e module; set KAAS_E2E_DIR")
	}
	return filepath.Dir(filepath.Dir(file)), nil
}

// prepareBinaries makes sure the control-plane binaries (hack/bins.sh, cached by version) and the
// harness' own tools (process-kubelet, testpod, imagebuild, pause) are built, and exports their directories in the
// environment for the inner process. It runs outside the network namespace because a first
// build downloads modules.
func prepareBinaries() error {
	if os.Getenv(envK8sBin) != "" && os.Getenv(envEtcdBin) != "" && os.Getenv(envTools) != "" {
		return nil
	}
	dir, err := moduleDir()
	if err != nil {
		return err
	}
	if os.Getenv(envK8sBin) == "" || os.Getenv(envEtcdBin) == "" {
		var out bytes.Buffer
		cmd := exec.Command(filepath.Join(dir, "hack", "bins.sh"))
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("hack/bins.sh: %w", err)
		}
		lines := strings.Fields(out.String())
		if len(lines) != 2 {
			return fmt.Errorf("hack/bins.sh printed %q, want two directories", out.String())
		}
		os.Setenv(envK8sBin, lines[0])
		os.Setenv(envEtcdBin, lines[1])
	}
	if os.Getenv(envTools) == "" {
		tools := filepath.Join(cacheDir(), "e2e-tools")
		if err := os.MkdirAll(tools, 0o755); err != nil {
			return err
		}
		// `go build` is incremental, so this costs a second or two once the build cache is warm.
		cmd := exec.Command("nice", "-n", "19", "go", "build", "-o", tools+"/",
			"./cmd/process-kubelet", "./cmd/testpod", "./cmd/imagebuild", "./cmd/pause")
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build harness tools: %w", err)
		}
		os.Setenv(envTools, tools)
	}
	return nil
}

func cacheDir() string {
	if d := os.Getenv("KAAS_CACHE"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "kaas")
}

// TestpodBinary is the path of the harness' own test program (cmd/testpod), which the default
// image table maps the image "kaas-e2e/testpod" to.
func TestpodBinary() string { return filepath.Join(os.Getenv(envTools), "testpod") }

// PauseBinary is cmd/pause, a static program that waits for a signal: the sandbox image of a
// real container runtime (images/realkubelet_test.go).
func PauseBinary() string { return filepath.Join(os.Getenv(envTools), "pause") }
