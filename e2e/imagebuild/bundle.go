package imagebuild

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BuildBundle makes the OLM bundle image of dir (what `make bundle` writes): what its
// bundle.Dockerfile says — FROM scratch, its LABELs, its COPYs (manifests/ to /manifests/,
// metadata/ to /metadata/) — as one layer, plus the org.opencontainers.image labels of spec
// (Version, Revision, Source, Title, Created; Binary and the rest are not used).
func BuildBundle(dir string, s Spec) (v1.Image, error) {
	df, err := os.ReadFile(filepath.Join(dir, "bundle.Dockerfile"))
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	var files []entry
	for _, line := range strings.Split(string(df), "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			if strings.TrimSpace(rest) != "scratch" {
				return nil, fmt.Errorf("bundle.Dockerfile: FROM %s, want scratch", rest)
			}
		case "LABEL":
			k, v, ok := strings.Cut(strings.TrimSpace(rest), "=")
			if !ok {
				return nil, fmt.Errorf("bundle.Dockerfile: LABEL %s", rest)
			}
			labels[k] = strings.Trim(v, `"`)
		case "COPY", "ADD":
			f := strings.Fields(rest)
			if len(f) != 2 {
				return nil, fmt.Errorf("bundle.Dockerfile: COPY %s", rest)
			}
			src, dst := filepath.Join(dir, f[0]), f[1]
			err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(src, p)
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				files = append(files, entry{name: path.Join("/", dst, filepath.ToSlash(rel)), mode: 0o644, data: b})
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s/bundle.Dockerfile copies no files", dir)
	}
	return scratchImage(files, s, "kaas imagebuild bundle", "OLM bundle: manifests, metadata", labels)
}

// scratchImage is an image FROM scratch of one layer of files, with labels and the
// org.opencontainers.image labels of s (Title, Version, Revision, Source, Created): the shape of
// the OLM bundle and catalog images.
func scratchImage(files []entry, s Spec, createdBy, comment string, labels map[string]string) (v1.Image, error) {
	if s.Created.IsZero() {
		s.Created = time.Unix(0, 0).UTC()
	}
	all := map[string]string{
		"org.opencontainers.image.title":    s.Title,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.source":   s.Source,
		"org.opencontainers.image.created":  s.Created.UTC().Format(time.RFC3339),
	}
	for k, v := range labels {
		all[k] = v
	}
	layer, err := layerOf(files, s.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: s.Created}, CreatedBy: createdBy, Comment: comment,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: s.Created}
	cf.Config = v1.Config{Labels: all}
	return mutate.ConfigFile(img, cf)
}

// VerifyBundle checks an OLM bundle image as OLM reads it: every annotation of
// /metadata/annotations.yaml is also a label with the same value, the manifests and metadata
// directories the labels name exist, and the manifests hold a ClusterServiceVersion.
func VerifyBundle(img v1.Image) ([]string, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	fs, err := ReadFiles(img)
	if err != nil {
		return nil, err
	}
	var bad []string
	ann, ok := fs.Data["/metadata/annotations.yaml"]
	if !ok {
		return []string{"no /metadata/annotations.yaml"}, nil
	}
	n := 0
	for _, line := range strings.Split(string(ann), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "operators.operatorframework.io.") {
			continue
		}
		n++
		if got := cf.Config.Labels[k]; got != strings.TrimSpace(v) {
			bad = append(bad, fmt.Sprintf("label %s=%q, annotations.yaml says %q", k, got, strings.TrimSpace(v)))
		}
	}
	if n == 0 {
		bad = append(bad, "annotations.yaml holds no operators.operatorframework.io annotations")
	}
	csv := false
	for p := range fs.Data {
		dir := "/" + strings.TrimSuffix(cf.Config.Labels["operators.operatorframework.io.bundle.manifests.v1"], "/")
		if strings.HasPrefix(p, dir+"/") && strings.HasSuffix(p, ".clusterserviceversion.yaml") {
			csv = true
		}
	}
	if !csv {
		bad = append(bad, "no ClusterServiceVersion in the manifests directory the labels name")
	}
	return bad, nil
}
