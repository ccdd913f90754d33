package kaastest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"kaas/e2e/harness"
	"kaas/e2e/imagebuild"
)

// NextOperatorImage is the operator image an upgrade test moves to (imageTags).
const NextOperatorImage = "ghcr.io/kaas/kaas-operator:0.1.1-e2e"

// imageTags are the tags every image gets here besides its own: the version config/default
// names, and the next release's a test upgrades to (the same build: the harness cannot build a
// second release) — the brokers' rolling upgrade, the operator's upgrade.
var imageTags = map[string][]string{"kaas": {"0.1.0", "0.1.1"}, "kaas-operator": {"0.1.0", "0.1.1-e2e"}}

// built is the process' one build of the layouts (a failed build is tried again by the next
// test that asks).
var built struct {
	sync.Mutex
	dir string
}

// Images returns the OCI layouts of the broker and operator images, built once per test
// process: from KAAS_E2E_IMAGES_DIR's layouts (e.g. build/images after `make images`), or from
// the dev build's binaries with the Dockerfiles' runtime layout (checked against them).
func Images(t testing.TB) (broker, operator string) {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "kaas-e2e-images-")
		if err != nil {
			t.Fatal(err)
		}
		if err := buildImages(t, dir); err != nil {
			_ = os.RemoveAll(dir)
			t.Fatal(err)
		}
		built.dir = dir
		harness.AtExit(func() { _ = os.RemoveAll(dir) })
	}
	return filepath.Join(built.dir, "kaas"), filepath.Join(built.dir, "kaas-operator")
}

func buildImages(t testing.TB, out string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	for _, im := range []struct{ name, env, dockerfile string }{
		{"kaas", "KAAS_BIN", "operator/broker.Dockerfile"},
		{"kaas-operator", "KAAS_OPERATOR_BIN", "operator/Dockerfile"},
	} {
		start := time.Now()
		img, tags, err := image(t, root, im.name, im.env, im.dockerfile)
		if err != nil {
			return err
		}
		if err := imagebuild.WriteLayout(filepath.Join(out, im.name), img, "ghcr.io/kaas/"+im.name, append(tags, imageTags[im.name]...)); err != nil {
			return err
		}
		t.Logf("image %s ready in %s", im.name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// image is one image and the tags it already has: KAAS_E2E_IMAGES_DIR's, or built here.
func image(t testing.TB, root, name, env, dockerfile string) (img v1.Image, tags []string, err error) {
	df, err := imagebuild.ParseDockerfile(filepath.Join(root, dockerfile))
	if err != nil {
		return nil, nil, err
	}
	if dir := os.Getenv("KAAS_E2E_IMAGES_DIR"); dir != "" {
		imgs, err := imagebuild.ReadLayout(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, err
		}
		for _, i := range imgs {
			if !slices.Contains(imageTags[name], i.Tag) {
				tags = append(tags, i.Tag)
			}
		}
		img = imgs[0].Image
	} else {
		img, err = imagebuild.Build(imagebuild.Spec{
			Binary: harness.CargoBinary(t, env, name), Path: df.Copies[len(df.Copies)-1],
			Entrypoint: df.Entrypoint, Cmd: df.Cmd, Title: name, Version: imageTags[name][0], Revision: "e2e",
			Source: "kaas e2e", StripDebug: true,
		})
		if err != nil {
			return nil, nil, err
		}
	}
	if bad, err := imagebuild.Verify(img, df); err != nil || len(bad) > 0 {
		return nil, nil, fmt.Errorf("%s does not match %s: %v %v", name, dockerfile, err, bad)
	}
	return img, tags, nil
}

// Pulled returns o with kaas pulled as a user's cluster pulls it: the images pushed to the
// harness registry and ghcr.io mirrored to it, no image-table entry for ghcr.io/kaas.
func Pulled(t testing.TB, o harness.Options) harness.Options {
	broker, operator := Images(t)
	o.Registry = true
	if o.RegistryImages == nil {
		o.RegistryImages = map[string]string{}
	}
	o.RegistryImages[broker] = "kaas/kaas"
	o.RegistryImages[operator] = "kaas/kaas-operator"
	o.Mirrors = append(o.Mirrors, "ghcr.io")
	return o
}

// WritableByImages makes dir (a volume's directory, an NFS export) owned by the images' user
// 65532, as a user's export for kaas must be (README, Install on Kubernetes).
func WritableByImages(t testing.TB, dir string) {
	t.Helper()
	if err := os.Chown(dir, imagebuild.NonrootUID, imagebuild.NonrootUID); err != nil {
		t.Fatal(err)
	}
}

// repoRoot is the repository above the working directory (the one with Cargo.lock).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "Cargo.lock")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no Cargo workspace above %s", dir)
		}
		dir = parent
	}
}
