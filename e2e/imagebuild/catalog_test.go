package imagebuild

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// standInBundle writes a registry+v1 bundle of package demo-operator, version 0.2.0, into a
// temporary directory: two channels, a CRD with one served and one unserved version, an upgrade
// edge from 0.1.0 (which it also skips), a required CRD and related images.
func standInBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"metadata/annotations.yaml": `annotations:
  operators.operatorframework.io.bundle.mediatype.v1: registry+v1
  operators.operatorframework.io.bundle.manifests.v1: manifests/
  operators.operatorframework.io.bundle.metadata.v1: metadata/
  operators.operatorframework.io.bundle.package.v1: demo-operator
  operators.operatorframework.io.bundle.channels.v1: alpha,stable
  operators.operatorframework.io.bundle.channel.default.v1: stable
`,
		"manifests/demo.clusterserviceversion.yaml": `apiVersion: operators.coreos.com/v1alpha1
kind: ClusterServiceVersion
metadata:
  name: demo-operator.v0.2.0
  annotations: {olm.skipRange: "<0.2.0", capabilities: Basic Install}
spec:
  version: 0.2.0
  replaces: demo-operator.v0.1.0
  skips: [demo-operator.v0.1.0]
  displayName: Demo
  description: A demo.
  icon: [{base64data: PHN2Zy8+, mediatype: image/svg+xml}]
  installModes: [{type: AllNamespaces, supported: true}]
  customresourcedefinitions:
    owned: [{name: widgets.demo.dev, kind: Widget, version: v1}]
    required: [{name: gadgets.other.dev, kind: Gadget, version: v2}]
  relatedImages: [{name: manager, image: "example.dev/demo:0.2.0"}]
`,
		"manifests/demo.dev_widgets.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.demo.dev}
spec:
  group: demo.dev
  names: {kind: Widget, plural: widgets}
  versions:
  - {name: v1, served: true, storage: true}
  - {name: v1beta1, served: false, storage: false}
`,
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// documents decodes a catalog file: one JSON document after another.
func documents(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	return docs
}

// The catalog a bundle renders to has its package, channels and bundle as OLM reads them.
func TestRenderCatalog(t *testing.T) {
	cat, err := RenderCatalog(standInBundle(t), "example.dev/demo-bundle:0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if cat.Package.Name != "demo-operator" || cat.Package.DefaultChannel != "stable" || cat.Package.Icon == nil {
		t.Errorf("package %+v", cat.Package)
	}
	want := ChannelEntry{Name: "demo-operator.v0.2.0", Replaces: "demo-operator.v0.1.0", Skips: []string{"demo-operator.v0.1.0"}, SkipRange: "<0.2.0"}
	if len(cat.Channels) != 2 || cat.Channels[0].Name != "alpha" || cat.Channels[1].Name != "stable" {
		t.Fatalf("channels %+v", cat.Channels)
	}
	for _, ch := range cat.Channels {
		if len(ch.Entries) != 1 || !reflect.DeepEqual(ch.Entries[0], want) {
			t.Errorf("channel %s entries %+v, want [%+v]", ch.Name, ch.Entries, want)
		}
	}
	b := cat.Bundles[0]
	if b.Name != "demo-operator.v0.2.0" || b.Image != "example.dev/demo-bundle:0.2.0" {
		t.Errorf("bundle %s %s", b.Name, b.Image)
	}
	var types []string
	for _, p := range b.Properties {
		types = append(types, p.Type)
	}
	// One olm.gvk: the unserved v1beta1 is not offered.
	if got := strings.Join(types, " "); got != "olm.package olm.gvk olm.gvk.required olm.csv.metadata" {
		t.Errorf("properties %s", got)
	}
	if b.Properties[1].Value != (gvk{Group: "demo.dev", Kind: "Widget", Version: "v1"}) || b.Properties[2].Value != (gvk{Group: "other.dev", Kind: "Gadget", Version: "v2"}) {
		t.Errorf("gvks %+v %+v", b.Properties[1].Value, b.Properties[2].Value)
	}
	meta := b.Properties[3].Value.(map[string]any)
	if meta["displayName"] != "Demo" || meta["installModes"] == nil || meta["crdDescriptions"] == nil {
		t.Errorf("olm.csv.metadata %v", meta)
	}
	if want := []RelatedImage{{Image: "example.dev/demo-bundle:0.2.0"}, {Name: "manager", Image: "example.dev/demo:0.2.0"}}; !reflect.DeepEqual(b.RelatedImages, want) {
		t.Errorf("relatedImages %+v", b.RelatedImages)
	}

	// The file: package, channels, bundle, as `opm render -o json` orders them, unescaped.
	data, err := cat.JSON()
	if err != nil {
		t.Fatal(err)
	}
	docs := documents(t, data)
	var schemas []string
	for _, d := range docs {
		schemas = append(schemas, d["schema"].(string)+":"+d["name"].(string))
	}
	if got := strings.Join(schemas, " "); got != "olm.package:demo-operator olm.channel:alpha olm.channel:stable olm.bundle:demo-operator.v0.2.0" {
		t.Errorf("documents %s", got)
	}
	if !bytes.Contains(data, []byte(`"skipRange": "<0.2.0"`)) {
		t.Errorf("skipRange escaped or missing:\n%s", data)
	}
}

// Validate refuses what OLM cannot serve, each with its reason.
func TestValidateCatalog(t *testing.T) {
	fresh := func() *Catalog {
		cat, err := RenderCatalog(standInBundle(t), "example.dev/demo-bundle:0.2.0")
		if err != nil {
			t.Fatal(err)
		}
		return cat
	}
	for _, tc := range []struct {
		name, want string
		breakIt    func(*Catalog)
	}{
		{"no default channel", `default channel "beta" is not one of its channels`, func(c *Catalog) { c.Package.DefaultChannel = "beta" }},
		{"an entry that is no bundle", `entry "demo-operator.v9" is no bundle`, func(c *Catalog) {
			c.Channels[0].Entries = append(c.Channels[0].Entries, ChannelEntry{Name: "demo-operator.v9", Replaces: "demo-operator.v0.2.0"})
		}},
		{"a bundle in no channel", `bundle "demo-operator.v0.3.0" is in no channel`, func(c *Catalog) {
			b := c.Bundles[0]
			b.Name = "demo-operator.v0.3.0"
			c.Bundles = append(c.Bundles, b)
		}},
		{"two heads", `2 heads`, func(c *Catalog) {
			b := c.Bundles[0]
			b.Name = "demo-operator.v0.3.0"
			c.Bundles = append(c.Bundles, b)
			c.Channels[0].Entries = append(c.Channels[0].Entries, ChannelEntry{Name: "demo-operator.v0.3.0"})
		}},
		{"replaces what the channel neither holds nor skips", `replaces "demo-operator.v0.1.0", which the channel neither holds nor skips`, func(c *Catalog) {
			c.Channels[1].Entries[0].Skips = nil
		}},
		{"a cycle", `0 heads`, func(c *Catalog) {
			b := c.Bundles[0]
			b.Name = "demo-operator.v0.1.0"
			c.Bundles = append(c.Bundles, b)
			c.Channels[0].Entries = []ChannelEntry{{Name: "demo-operator.v0.2.0", Replaces: "demo-operator.v0.1.0"}, {Name: "demo-operator.v0.1.0", Replaces: "demo-operator.v0.2.0"}}
			c.Channels[1].Entries = c.Channels[0].Entries
		}},
		{"a bundle of another package", `olm.package`, func(c *Catalog) {
			c.Bundles[0].Properties[0].Value = map[string]string{"packageName": "other", "version": "0.2.0"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fresh()
			if err := c.Validate(); err != nil {
				t.Fatalf("the unbroken catalog: %v", err)
			}
			tc.breakIt(c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// The catalog image holds the catalog where its label says, FROM scratch; built from the stand-in
// and from the repository's bundle/ when `make bundle` wrote one.
func TestCatalogImage(t *testing.T) {
	dirs := map[string]string{standInBundle(t): "demo-operator"}
	if _, err := os.Stat("../../bundle/metadata/annotations.yaml"); err == nil {
		dirs["../../bundle"] = "kaas-operator"
	}
	for dir, pkg := range dirs {
		cat, err := RenderCatalog(dir, "example.dev/bundle:1")
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		img, err := BuildCatalog(cat, Spec{Title: pkg + "-catalog", Version: "1", Revision: "abc"})
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.Labels[CatalogConfigsLabel] != "/configs" || cf.Config.Labels["org.opencontainers.image.revision"] != "abc" {
			t.Errorf("%s: labels %v", dir, cf.Config.Labels)
		}
		fs, err := ReadFiles(img)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := cat.JSON()
		if got := fs.Data["/configs/"+pkg+"/catalog.json"]; !bytes.Equal(got, want) {
			t.Errorf("%s: /configs/%s/catalog.json is %d bytes, want the rendered %d (files %v)", dir, pkg, len(got), len(want), fs.Headers)
		}
		if len(fs.Headers) > 3 {
			t.Errorf("%s: more than the catalog in the image: %v", dir, fs.Headers)
		}
	}
}
