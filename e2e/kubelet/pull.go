package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
)

// imageStore is a node's image cache: images pulled from a registry by reference and unpacked,
// one root filesystem per manifest digest, plus which digest each reference last resolved to.
// It lives in the kubelet's root directory, so a restarted kubelet finds its images again.
type imageStore struct {
	dir     string
	mirrors map[string]string // registry host → the host:port to pull from instead
	opts    []remote.Option

	mu   sync.Mutex // one pull or lookup at a time: pods of one image wait for one unpack
	refs map[string]string
}

// pulledImage is an unpacked image a container runs from.
type pulledImage struct {
	Digest string    // sha256:... of the manifest
	ID     string    // repository@digest, as status.imageID shows it
	RootFS string    // the unpacked layers (read-only: containers get an overlay on it)
	Config v1.Config // entrypoint, cmd, user, env, working directory
}

// pullError carries the waiting reason a failed pull shows in the container status.
type pullError struct {
	reason string
	err    error
}

func (e *pullError) Error() string { return e.err.Error() }
func (e *pullError) Unwrap() error { return e.err }

func newImageStore(dir string, mirrors map[string]string, opts ...remote.Option) (*imageStore, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sha256"), 0o755); err != nil {
		return nil, err
	}
	s := &imageStore{dir: dir, mirrors: mirrors, refs: map[string]string{}, opts: opts}
	if b, err := os.ReadFile(filepath.Join(dir, "refs.json")); err == nil {
		_ = json.Unmarshal(b, &s.refs)
	}
	return s, nil
}

// defaultPullPolicy is what the apiserver defaults an empty imagePullPolicy to: Always for
// :latest or no tag, IfNotPresent otherwise.
func defaultPullPolicy(image string) corev1.PullPolicy {
	ref, err := name.ParseReference(image)
	if err != nil {
		return corev1.PullIfNotPresent
	}
	if t, ok := ref.(name.Tag); ok && t.TagStr() == "latest" && !strings.Contains(image, "@") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// ensure makes image available under policy, pulling and unpacking it when needed, as the
// kubelet's image manager does: Never uses only what is cached, IfNotPresent pulls what is not,
// Always asks the registry which digest the reference names now (and unpacks only a new one).
func (s *imageStore) ensure(ctx context.Context, image string, policy corev1.PullPolicy) (*pulledImage, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, &pullError{"InvalidImageName", fmt.Errorf("failed to apply default image tag %q: %v", image, err)}
	}
	if policy == "" {
		policy = defaultPullPolicy(image)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if policy != corev1.PullAlways {
		if img, ok := s.cached(image, ref); ok {
			return img, nil
		}
		if policy == corev1.PullNever {
			return nil, &pullError{"ErrImageNeverPull",
				fmt.Errorf("Container image %q is not present with pull policy of Never", image)}
		}
	}
	img, err := s.pull(ctx, image, ref)
	if err != nil {
		return nil, &pullError{"ErrImagePull", fmt.Errorf("failed to pull and unpack image %q: %w", image, err)}
	}
	return img, nil
}

// cached returns the image image last resolved to, if it is still unpacked.
func (s *imageStore) cached(image string, ref name.Reference) (*pulledImage, bool) {
	digest := s.refs[image]
	if d, ok := ref.(name.Digest); ok {
		digest = d.DigestStr()
	}
	if digest == "" {
		return nil, false
	}
	img, err := s.load(ref, digest)
	return img, err == nil
}

func (s *imageStore) imageDir(digest string) string {
	return filepath.Join(s.dir, strings.Replace(digest, ":", "/", 1))
}

func (s *imageStore) load(ref name.Reference, digest string) (*pulledImage, error) {
	dir := s.imageDir(digest)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(b, &cf); err != nil {
		return nil, err
	}
	return &pulledImage{Digest: digest, ID: ref.Context().Name() + "@" + digest,
		RootFS: filepath.Join(dir, "rootfs"), Config: cf.Config}, nil
}

// remoteRef is ref on the registry it is pulled from (its registry's mirror, if any).
func (s *imageStore) remoteRef(ref name.Reference) (name.Reference, error) {
	mirror, ok := s.mirrors[ref.Context().RegistryStr()]
	if !ok {
		return ref, nil
	}
	repo := mirror + "/" + ref.Context().RepositoryStr()
	if d, ok := ref.(name.Digest); ok {
		return name.NewDigest(repo + "@" + d.DigestStr())
	}
	return name.NewTag(repo + ":" + ref.Identifier())
}

func (s *imageStore) pull(ctx context.Context, image string, ref name.Reference) (*pulledImage, error) {
	from, err := s.remoteRef(ref)
	if err != nil {
		return nil, err
	}
	opts := append([]remote.Option{remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})}, s.opts...)
	desc, err := remote.Get(from, opts...)
	if err != nil {
		return nil, err
	}
	img, err := desc.Image() // an index resolves to this platform's image
	if err != nil {
		return nil, err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	digest := d.String()
	if _, err := s.load(ref, digest); err != nil {
		start := time.Now()
		if err := s.unpack(img, digest); err != nil {
			return nil, err
		}
		log.Printf("image %s: pulled %s from %s and unpacked in %s", image, digest, from.Context().RegistryStr(),
			time.Since(start).Round(time.Millisecond))
	}
	s.refs[image] = digest
	if b, err := json.Marshal(s.refs); err == nil {
		_ = writeFileAtomic(filepath.Join(s.dir, "refs.json"), b)
	}
	return s.load(ref, digest)
}

// unpack applies img's layers in order into a fresh directory and moves it into place once
// complete, so a half-unpacked image is never used.
func (s *imageStore) unpack(img v1.Image, digest string) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	final := s.imageDir(digest)
	tmp := final + ".unpacking"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "rootfs"), 0o755); err != nil {
		return err
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		err = applyLayer(filepath.Join(tmp, "rootfs"), rc)
		rc.Close()
		if err != nil {
			ld, _ := l.Digest()
			return fmt.Errorf("layer %d (%s): %w", i, ld, err)
		}
	}
	b, err := json.Marshal(cf)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), b, 0o644); err != nil {
		return err
	}
	_ = os.RemoveAll(final)
	return os.Rename(tmp, final)
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// containerArgv combines an image's entrypoint and cmd with the pod's command and args as a
// container runtime does: command replaces the entrypoint (and drops cmd), args replace cmd.
func containerArgv(cfg v1.Config, command, args []string) []string {
	switch {
	case len(command) > 0:
		return append(append([]string{}, command...), args...)
	case len(args) > 0:
		return append(append([]string{}, cfg.Entrypoint...), args...)
	default:
		return append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...)
	}
}
