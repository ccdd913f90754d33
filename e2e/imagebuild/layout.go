package imagebuild

import (
	"fmt"
	"os"
	"regexp"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Annotations of an image in an OCI layout's index: the tag (the OCI convention skopeo and
// oras read) and the full name (what `ctr image import` reads).
const (
	AnnotationRefName   = "org.opencontainers.image.ref.name"
	AnnotationImageName = "io.containerd.image.name"
)

var tagUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tags are the tags an image gets: its crate version, and the version with the git revision
// (`0.1.0-1a2b3c4d5e6f`, `-dirty` appended when the tree had changes).
func Tags(version, revision string) []string {
	short := revision
	dirty := ""
	if len(short) > 6 && short[len(short)-6:] == "-dirty" {
		short, dirty = short[:len(short)-6], "-dirty"
	}
	if len(short) > 12 {
		short = short[:12]
	}
	tags := []string{version}
	if short != "" {
		tags = append(tags, tagUnsafe.ReplaceAllString(version+"-"+short+dirty, "_"))
	}
	return tags
}

// WriteLayout writes img as a fresh OCI image layout in dir, once per tag of repository repo.
func WriteLayout(dir string, img v1.Image, repo string, tags []string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, tag := range tags {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			AnnotationRefName: tag, AnnotationImageName: repo + ":" + tag,
		})); err != nil {
			return err
		}
	}
	return nil
}

// Tagged is one image of a layout with its tag and full name.
type Tagged struct {
	Tag, Name string
	Image     v1.Image
}

// ReadLayout lists the images of an OCI layout written by WriteLayout.
func ReadLayout(dir string) ([]Tagged, error) {
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := ii.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Tagged
	for _, d := range m.Manifests {
		img, err := ii.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		out = append(out, Tagged{Tag: d.Annotations[AnnotationRefName], Name: d.Annotations[AnnotationImageName], Image: img})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no images", dir)
	}
	return out, nil
}

// Push copies every tag of the layout in dir to repo (host[:port]/path) and returns the
// references written.
func Push(dir, repo string, opts ...remote.Option) ([]string, error) {
	imgs, err := ReadLayout(dir)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, t := range imgs {
		if t.Tag == "" {
			return nil, fmt.Errorf("%s: an image without a %s annotation", dir, AnnotationRefName)
		}
		ref, err := name.NewTag(repo + ":" + t.Tag)
		if err != nil {
			return nil, err
		}
		if err := remote.Write(ref, t.Image, opts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		refs = append(refs, ref.String())
	}
	return refs, nil
}
