package imagebuild

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

var dockerfiles = map[string]string{
	"kaas":          "../../operator/broker.Dockerfile",
	"kaas-operator": "../../operator/Dockerfile",
}

func TestParseDockerfiles(t *testing.T) {
	for img, want := range map[string]Dockerfile{
		"kaas":          {From: "gcr.io/distroless/cc-debian12:nonroot", User: User, Workdir: HomeDir, Entrypoint: []string{"/kaas"}, Copies: []string{"/kaas"}},
		"kaas-operator": {From: "gcr.io/distroless/cc-debian12:nonroot", User: User, Workdir: HomeDir, Entrypoint: []string{"/kaas-operator"}, Cmd: []string{"run"}, Copies: []string{"/kaas-operator"}},
	} {
		df, err := ParseDockerfile(dockerfiles[img])
		if err != nil {
			t.Fatal(err)
		}
		want.Env = map[string]string{"SSL_CERT_FILE": CABundle}
		if !reflect.DeepEqual(*df, want) {
			t.Errorf("%s: parsed %+v\nwant %+v", img, *df, want)
		}
	}
}

// An image built the way `make images` builds it has the runtime layout each Dockerfile
// declares (a host binary stands in for the Rust one: the layout does not depend on it), and a
// layout written and read back holds the same image under both tags.
func TestBuildMatchesDockerfiles(t *testing.T) {
	bin := "/bin/true" // dynamically linked, like the cargo binaries
	for name, file := range dockerfiles {
		df, err := ParseDockerfile(file)
		if err != nil {
			t.Fatal(err)
		}
		img, err := Build(Spec{Binary: bin, Path: df.Copies[0], Entrypoint: df.Entrypoint, Cmd: df.Cmd,
			Title: name, Version: "0.1.0", Revision: "0123456789abcdef0123", Source: "https://example.invalid/kaas",
			Created: time.Unix(1700000000, 0)})
		if err != nil {
			t.Fatal(err)
		}
		bad, err := Verify(img, df)
		if err != nil || len(bad) > 0 {
			t.Fatalf("%s: %v %v", name, err, bad)
		}
		cf, _ := img.ConfigFile()
		if cf.Config.Labels["org.opencontainers.image.version"] != "0.1.0" ||
			cf.Config.Labels["org.opencontainers.image.revision"] != "0123456789abcdef0123" {
			t.Errorf("%s labels %v", name, cf.Config.Labels)
		}
		dir := filepath.Join(t.TempDir(), name)
		if err := WriteLayout(dir, img, "ghcr.io/kaas/"+name, Tags("0.1.0", "0123456789abcdef0123")); err != nil {
			t.Fatal(err)
		}
		back, err := ReadLayout(dir)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := img.Digest()
		var names []string
		for _, b := range back {
			d, _ := b.Image.Digest()
			if d != want {
				t.Errorf("%s: digest %s in the layout, built %s", b.Name, d, want)
			}
			names = append(names, b.Name)
		}
		if strings.Join(names, " ") != "ghcr.io/kaas/"+name+":0.1.0 ghcr.io/kaas/"+name+":0.1.0-0123456789ab" {
			t.Errorf("tags %v", names)
		}
		// Reproducible: the same inputs give the same digest.
		again, _ := Build(Spec{Binary: bin, Path: df.Copies[0], Entrypoint: df.Entrypoint, Cmd: df.Cmd,
			Title: name, Version: "0.1.0", Revision: "0123456789abcdef0123", Source: "https://example.invalid/kaas",
			Created: time.Unix(1700000000, 0)})
		if d, _ := again.Digest(); d != want {
			t.Errorf("%s: rebuilt with digest %s, first %s", name, d, want)
		}
	}
}

// Verify catches an image that drifts from its Dockerfile.
func TestVerifyReportsDrift(t *testing.T) {
	df, err := ParseDockerfile(dockerfiles["kaas-operator"])
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(Spec{Binary: "/bin/true", Path: "/kaas-operator", Entrypoint: []string{"/kaas-operator"}, Cmd: []string{"run"}})
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Config.User = "0"
	cf.Config.Cmd = nil
	cf.Config.Env = []string{"PATH=/bin"}
	drifted, _ := mutate.ConfigFile(img, cf)
	bad, err := Verify(drifted, df)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`user "0"`, "cmd []", "env SSL_CERT_FILE", "no SSL_CERT_FILE"} {
		if !strings.Contains(strings.Join(bad, "\n"), want) {
			t.Errorf("drift %q not reported: %v", want, bad)
		}
	}
	wrongPath, _ := Build(Spec{Binary: "/bin/true", Path: "/bin/kaas-operator", Entrypoint: []string{"/kaas-operator"}, Cmd: []string{"run"}})
	bad, _ = Verify(wrongPath, df)
	if !strings.Contains(strings.Join(bad, "\n"), "/kaas-operator (a COPY destination) is not a file") {
		t.Errorf("a binary at the wrong path: %v", bad)
	}
}

// The images `make images` wrote (build/images, or KAAS_IMAGES_DIR), when there are any.
func TestBuiltImagesMatchDockerfiles(t *testing.T) {
	dir := os.Getenv("KAAS_IMAGES_DIR")
	if dir == "" {
		dir = "../../build/images"
	}
	found := false
	for name, file := range dockerfiles {
		layoutDir := filepath.Join(dir, name)
		if _, err := os.Stat(filepath.Join(layoutDir, "index.json")); err != nil {
			continue
		}
		found = true
		df, err := ParseDockerfile(file)
		if err != nil {
			t.Fatal(err)
		}
		imgs, err := ReadLayout(layoutDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range imgs {
			bad, err := Verify(im.Image, df)
			if err != nil || len(bad) > 0 {
				t.Errorf("%s: %v %v", im.Name, err, bad)
			}
			checkLabels(t, im)
		}
	}
	if !found {
		t.Skipf("no images in %s (make images)", dir)
	}
}

func checkLabels(t *testing.T, im Tagged) {
	cf, err := im.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"version", "revision", "source"} {
		if cf.Config.Labels["org.opencontainers.image."+l] == "" {
			t.Errorf("%s: no org.opencontainers.image.%s label", im.Name, l)
		}
	}
	if !strings.HasPrefix(im.Tag, cf.Config.Labels["org.opencontainers.image.version"]) {
		t.Errorf("%s: tag %s does not start with the version label", im.Name, im.Tag)
	}
}

// The OLM bundle image holds what bundle.Dockerfile copies and its labels, which match
// metadata/annotations.yaml; built from a small stand-in, and from the repository's bundle/ when
// `make bundle` wrote one.
func TestBundleImage(t *testing.T) {
	standIn := t.TempDir()
	files := map[string]string{
		"bundle.Dockerfile": "FROM scratch\n\nLABEL operators.operatorframework.io.bundle.mediatype.v1=registry+v1\n" +
			"LABEL operators.operatorframework.io.bundle.manifests.v1=manifests/\nLABEL operators.operatorframework.io.bundle.package.v1=kaas-operator\n\n" +
			"COPY manifests /manifests/\nCOPY metadata /metadata/\n",
		"manifests/kaas-operator.clusterserviceversion.yaml": "kind: ClusterServiceVersion\n",
		"manifests/kaas.dev_kafkaclusters.yaml":              "kind: CustomResourceDefinition\n",
		"metadata/annotations.yaml": "annotations:\n  operators.operatorframework.io.bundle.mediatype.v1: registry+v1\n" +
			"  operators.operatorframework.io.bundle.manifests.v1: manifests/\n  operators.operatorframework.io.bundle.package.v1: kaas-operator\n",
	}
	for name, text := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(standIn, name)), 0o755)
		if err := os.WriteFile(filepath.Join(standIn, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dirs := []string{standIn}
	if _, err := os.Stat("../../bundle/bundle.Dockerfile"); err == nil {
		dirs = append(dirs, "../../bundle")
	}
	for _, dir := range dirs {
		img, err := BuildBundle(dir, Spec{Version: "0.1.0", Revision: "abc", Title: "kaas-operator-bundle"})
		if err != nil {
			t.Fatal(err)
		}
		if bad, err := VerifyBundle(img); err != nil || len(bad) > 0 {
			t.Fatalf("%s: %v %v", dir, err, bad)
		}
		fs, _ := ReadFiles(img)
		if _, ok := fs.Data["/manifests/kaas-operator.clusterserviceversion.yaml"]; !ok {
			t.Errorf("%s: no CSV at /manifests: %v", dir, fs.Headers)
		}
		// A label that disagrees with annotations.yaml is caught.
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		cf.Config.Labels["operators.operatorframework.io.bundle.package.v1"] = "other"
		drifted, _ := mutate.ConfigFile(img, cf)
		if bad, _ := VerifyBundle(drifted); len(bad) != 1 || !strings.Contains(bad[0], "bundle.package.v1") {
			t.Errorf("%s: drift not caught: %v", dir, bad)
		}
	}
}
