package imagebuild

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

// CatalogConfigsLabel is the label by which OLM finds the file-based catalog in a catalog image.
const CatalogConfigsLabel = "operators.operatorframework.io.index.configs.v1"

// CatalogDir is where a catalog image holds its file-based catalog (one directory a package).
const CatalogDir = "/configs"

// Catalog is a file-based catalog of one package: its olm.package, olm.channel and olm.bundle
// documents, in the declarative-config schemas OLM reads (operator-registry's `declcfg`).
type Catalog struct {
	Package  Package
	Channels []Channel
	Bundles  []Bundle
}

type Package struct {
	Schema         string `json:"schema"`
	Name           string `json:"name"`
	DefaultChannel string `json:"defaultChannel"`
	Description    string `json:"description,omitempty"`
	Icon           *Icon  `json:"icon,omitempty"`
}

type Icon struct {
	Data      string `json:"base64data"`
	MediaType string `json:"mediatype"`
}

type Channel struct {
	Schema  string         `json:"schema"`
	Name    string         `json:"name"`
	Package string         `json:"package"`
	Entries []ChannelEntry `json:"entries"`
}

type ChannelEntry struct {
	Name      string   `json:"name"`
	Replaces  string   `json:"replaces,omitempty"`
	Skips     []string `json:"skips,omitempty"`
	SkipRange string   `json:"skipRange,omitempty"`
}

type Bundle struct {
	Schema        string         `json:"schema"`
	Name          string         `json:"name"`
	Package       string         `json:"package"`
	Image         string         `json:"image"`
	Properties    []Property     `json:"properties"`
	RelatedImages []RelatedImage `json:"relatedImages,omitempty"`
}

type Property struct {
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type RelatedImage struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

// csv is the part of a ClusterServiceVersion a catalog is rendered from.
type csv struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
		Labels      map[string]string `json:"labels"`
	} `json:"metadata"`
	RawSpec map[string]any `json:"-"`
	Spec    struct {
		Version     string   `json:"version"`
		Replaces    string   `json:"replaces"`
		Skips       []string `json:"skips"`
		DisplayName string   `json:"displayName"`
		Description string   `json:"description"`
		Icon        []Icon   `json:"icon"`
		CRDs        struct {
			Owned    []crdDescription `json:"owned"`
			Required []crdDescription `json:"required"`
		} `json:"customresourcedefinitions"`
		RelatedImages []RelatedImage `json:"relatedImages"`
	} `json:"spec"`
}

type crdDescription struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

type crd struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group    string                `json:"group"`
		Names    struct{ Kind string } `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
		} `json:"versions"`
	} `json:"spec"`
}

type gvk struct {
	Group   string `json:"group"`
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

// RenderCatalog renders the registry+v1 bundle in dir (what `make bundle` writes: manifests/
// with one CSV and its CRDs, metadata/annotations.yaml), whose image is bundleImage, into a
// file-based catalog as `opm render` does: the package with the bundle's default channel, each
// of its channels with the bundle as an entry (replaces, skips and olm.skipRange from the CSV),
// and the bundle with its olm.package, olm.gvk (every served version of every CRD it ships),
// olm.gvk.required and olm.csv.metadata properties and its related images.
func RenderCatalog(dir, bundleImage string) (*Catalog, error) {
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := readYAML(filepath.Join(dir, "metadata", "annotations.yaml"), &ann); err != nil {
		return nil, err
	}
	pkg := ann.Annotations["operators.operatorframework.io.bundle.package.v1"]
	channels := splitList(ann.Annotations["operators.operatorframework.io.bundle.channels.v1"])
	defaultChannel := ann.Annotations["operators.operatorframework.io.bundle.channel.default.v1"]
	if defaultChannel == "" && len(channels) == 1 {
		defaultChannel = channels[0]
	}
	if media := ann.Annotations["operators.operatorframework.io.bundle.mediatype.v1"]; media != "registry+v1" {
		return nil, fmt.Errorf("%s: bundle media type %q, want registry+v1", dir, media)
	}
	if pkg == "" || len(channels) == 0 {
		return nil, fmt.Errorf("%s: annotations.yaml names no package or no channel", dir)
	}

	manifests, err := filepath.Glob(filepath.Join(dir, "manifests", "*.yaml"))
	if err != nil {
		return nil, err
	}
	var theCSV *csv
	var gvks []gvk
	for _, m := range manifests {
		var head struct{ Kind string }
		if err := readYAML(m, &head); err != nil {
			return nil, err
		}
		switch head.Kind {
		case "ClusterServiceVersion":
			if theCSV != nil {
				return nil, fmt.Errorf("%s: more than one ClusterServiceVersion", dir)
			}
			theCSV = &csv{}
			var raw struct {
				Spec map[string]any `json:"spec"`
			}
			if err := readYAML(m, theCSV); err != nil {
				return nil, err
			}
			if err := readYAML(m, &raw); err != nil {
				return nil, err
			}
			theCSV.RawSpec = raw.Spec
		case "CustomResourceDefinition":
			var c crd
			if err := readYAML(m, &c); err != nil {
				return nil, err
			}
			for _, v := range c.Spec.Versions {
				if v.Served {
					gvks = append(gvks, gvk{Group: c.Spec.Group, Kind: c.Spec.Names.Kind, Version: v.Name})
				}
			}
		}
	}
	if theCSV == nil {
		return nil, fmt.Errorf("%s: no ClusterServiceVersion in manifests/", dir)
	}
	c := theCSV
	if c.Metadata.Name == "" || c.Spec.Version == "" {
		return nil, fmt.Errorf("%s: the CSV has no name or no spec.version", dir)
	}
	sort.Slice(gvks, func(i, j int) bool {
		return gvks[i].Group+"/"+gvks[i].Kind+"/"+gvks[i].Version < gvks[j].Group+"/"+gvks[j].Kind+"/"+gvks[j].Version
	})

	props := []Property{{Type: "olm.package", Value: map[string]string{"packageName": pkg, "version": c.Spec.Version}}}
	for _, g := range gvks {
		props = append(props, Property{Type: "olm.gvk", Value: g})
	}
	for _, r := range c.Spec.CRDs.Required {
		group := r.Name[strings.Index(r.Name, ".")+1:]
		props = append(props, Property{Type: "olm.gvk.required", Value: gvk{Group: group, Kind: r.Kind, Version: r.Version}})
	}
	// olm.csv.metadata: what OLM shows of the CSV without unpacking the bundle, under opm's names.
	meta := map[string]any{"annotations": c.Metadata.Annotations}
	if len(c.Metadata.Labels) > 0 {
		meta["labels"] = c.Metadata.Labels
	}
	for from, to := range map[string]string{
		"apiservicedefinitions": "apiServiceDefinitions", "customresourcedefinitions": "crdDescriptions",
		"description": "description", "displayName": "displayName", "installModes": "installModes",
		"keywords": "keywords", "links": "links", "maintainers": "maintainers", "maturity": "maturity",
		"minKubeVersion": "minKubeVersion", "nativeAPIs": "nativeAPIs", "provider": "provider",
	} {
		if v, ok := c.RawSpec[from]; ok {
			meta[to] = v
		}
	}
	props = append(props, Property{Type: "olm.csv.metadata", Value: meta})

	related := []RelatedImage{{Name: "", Image: bundleImage}}
	related = append(related, c.Spec.RelatedImages...)

	entry := ChannelEntry{Name: c.Metadata.Name, Replaces: c.Spec.Replaces, Skips: c.Spec.Skips, SkipRange: c.Metadata.Annotations["olm.skipRange"]}
	cat := &Catalog{
		Package: Package{Schema: "olm.package", Name: pkg, DefaultChannel: defaultChannel, Description: c.Spec.Description},
		Bundles: []Bundle{{Schema: "olm.bundle", Name: c.Metadata.Name, Package: pkg, Image: bundleImage, Properties: props, RelatedImages: related}},
	}
	if len(c.Spec.Icon) > 0 {
		cat.Package.Icon = &c.Spec.Icon[0]
	}
	for _, ch := range channels {
		cat.Channels = append(cat.Channels, Channel{Schema: "olm.channel", Name: ch, Package: pkg, Entries: []ChannelEntry{entry}})
	}
	return cat, cat.Validate()
}

// Validate checks what OLM relies on in a package's catalog (the checks of `opm validate` that
// one package can fail): the schemas and package names agree; the default channel exists; every
// channel entry is a bundle of the package and every bundle is in a channel; each bundle names
// its image and carries one olm.package property of this package; each channel's upgrade graph
// (replaces) has one head and no cycle, and replaces only what the channel holds or skips.
func (c *Catalog) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	p := c.Package
	if p.Schema != "olm.package" || p.Name == "" {
		bad("package: schema %q, name %q", p.Schema, p.Name)
	}
	bundles := map[string]bool{}
	for _, b := range c.Bundles {
		if b.Schema != "olm.bundle" || b.Package != p.Name || b.Name == "" || b.Image == "" {
			bad("bundle %q: schema %q, package %q, image %q", b.Name, b.Schema, b.Package, b.Image)
		}
		if bundles[b.Name] {
			bad("bundle %q appears twice", b.Name)
		}
		bundles[b.Name] = true
		packages := 0
		for _, prop := range b.Properties {
			if prop.Type == "olm.package" {
				packages++
				var v struct{ PackageName, Version string }
				if raw, err := json.Marshal(prop.Value); err != nil || json.Unmarshal(raw, &v) != nil || v.PackageName != p.Name || v.Version == "" {
					bad("bundle %q: olm.package %v", b.Name, prop.Value)
				}
			}
		}
		if packages != 1 {
			bad("bundle %q: %d olm.package properties, want 1", b.Name, packages)
		}
	}
	inChannel := map[string]bool{}
	defaultFound := false
	for _, ch := range c.Channels {
		if ch.Schema != "olm.channel" || ch.Package != p.Name || ch.Name == "" || len(ch.Entries) == 0 {
			bad("channel %q: schema %q, package %q, %d entries", ch.Name, ch.Schema, ch.Package, len(ch.Entries))
			continue
		}
		defaultFound = defaultFound || ch.Name == p.DefaultChannel
		entries := map[string]ChannelEntry{}
		for _, e := range ch.Entries {
			if !bundles[e.Name] {
				bad("channel %q: entry %q is no bundle of package %q", ch.Name, e.Name, p.Name)
			}
			inChannel[e.Name] = true
			entries[e.Name] = e
		}
		replaced := map[string]bool{}
		for _, e := range ch.Entries {
			if e.Replaces == "" {
				continue
			}
			_, held := entries[e.Replaces]
			skipped := false
			for _, other := range ch.Entries {
				for _, s := range other.Skips {
					skipped = skipped || s == e.Replaces
				}
			}
			if !held && !skipped {
				bad("channel %q: %q replaces %q, which the channel neither holds nor skips", ch.Name, e.Name, e.Replaces)
			}
			replaced[e.Replaces] = true
		}
		var heads []string
		for _, e := range ch.Entries {
			if !replaced[e.Name] {
				heads = append(heads, e.Name)
			}
		}
		if len(heads) != 1 {
			bad("channel %q: %d heads %v, want 1 (a cycle, or two unrelated entries)", ch.Name, len(heads), heads)
		} else {
			seen := map[string]bool{}
			for at := heads[0]; at != ""; at = entries[at].Replaces {
				if seen[at] {
					bad("channel %q: the replaces chain loops at %q", ch.Name, at)
					break
				}
				seen[at] = true
			}
		}
	}
	if !defaultFound {
		bad("package %q: default channel %q is not one of its channels", p.Name, p.DefaultChannel)
	}
	for b := range bundles {
		if !inChannel[b] {
			bad("bundle %q is in no channel", b)
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("invalid catalog:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// JSON is the catalog as `opm render -o json` writes it: one document after another.
func (c *Catalog) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "    ")
	enc.SetEscapeHTML(false)
	docs := []any{c.Package}
	for _, ch := range c.Channels {
		docs = append(docs, ch)
	}
	for _, b := range c.Bundles {
		docs = append(docs, b)
	}
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// BuildCatalog makes the catalog image of c: FROM scratch, the catalog at
// /configs/<package>/catalog.json and the label OLM finds it by, plus the
// org.opencontainers.image labels of s. OLM v1 (a ClusterCatalog) serves such an image as it
// is; OLM v0's CatalogSource runs the image, so it needs `opm serve` as its entrypoint, which
// this image does not have (opm is not built here).
func BuildCatalog(c *Catalog, s Spec) (v1.Image, error) {
	data, err := c.JSON()
	if err != nil {
		return nil, err
	}
	return scratchImage([]entry{{name: CatalogDir + "/" + c.Package.Name + "/catalog.json", mode: 0o644, data: data}}, s,
		"kaas imagebuild catalog", "file-based catalog", map[string]string{CatalogConfigsLabel: CatalogDir})
}

func readYAML(file string, into any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
