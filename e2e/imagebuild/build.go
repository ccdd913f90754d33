// Package imagebuild assembles OCI images of kaas' binaries without a base image and without a
// container engine: an empty image plus two layers, the runtime (the shared libraries the
// binary needs as `ldd` lists them, the dynamic loader, CA certificates, /etc/passwd and
// /etc/group with the distroless "nonroot" user 65532, a writable /tmp) and the binary. The
// result has the runtime layout of operator/Dockerfile and operator/broker.Dockerfile (FROM
// gcr.io/distroless/cc-debian12:nonroot): Verify checks one against the other.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The runtime layout every image shares (that of distroless/cc-debian12:nonroot).
const (
	NonrootUID  = 65532
	User        = "65532:65532"
	HomeDir     = "/home/nonroot"
	CABundle    = "/etc/ssl/certs/ca-certificates.crt"
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Spec describes one image.
type Spec struct {
	Binary     string   // the binary on this machine
	Path       string   // where it goes in the image, e.g. /kaas
	Entrypoint []string // e.g. ["/kaas"]
	Cmd        []string // e.g. ["run"]; may be empty
	Title      string   // org.opencontainers.image.title
	Version    string   // org.opencontainers.image.version (the crate version)
	Revision   string   // org.opencontainers.image.revision (the git commit)
	Source     string   // org.opencontainers.image.source
	Created    time.Time
	// StripDebug copies the binary through `objcopy --strip-debug` first (symbols stay, so
	// backtraces still name functions; DWARF line tables go).
	StripDebug bool
	// CACerts is the CA bundle to ship (default: this machine's /etc/ssl/certs/ca-certificates.crt).
	CACerts string
}

// Env is the image's environment.
func Env() []string {
	return []string{"PATH=" + DefaultPath, "SSL_CERT_FILE=" + CABundle}
}

// Build assembles the image.
func Build(s Spec) (v1.Image, error) {
	if s.Path == "" || !path.IsAbs(s.Path) {
		return nil, fmt.Errorf("image path %q must be absolute", s.Path)
	}
	if s.Created.IsZero() {
		s.Created = time.Unix(0, 0).UTC()
	}
	if s.CACerts == "" {
		s.CACerts = "/etc/ssl/certs/ca-certificates.crt"
	}
	bin := s.Binary
	if s.StripDebug {
		tmp, err := os.CreateTemp("", "imagebuild-*")
		if err != nil {
			return nil, err
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		if out, err := exec.Command("objcopy", "--strip-debug", s.Binary, tmp.Name()).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("objcopy --strip-debug %s: %v: %s", s.Binary, err, out)
		}
		bin = tmp.Name()
	}
	libs, err := SharedLibraries(s.Binary)
	if err != nil {
		return nil, err
	}
	runtimeFiles, err := runtimeTree(libs, s.CACerts)
	if err != nil {
		return nil, err
	}
	binData, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	appFiles := []entry{{name: s.Path, mode: 0o755, data: binData}}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range []struct {
		files   []entry
		comment string
	}{
		{runtimeFiles, "runtime: shared libraries, loader, CA certificates, nonroot user, /tmp"},
		{appFiles, "binary " + s.Path},
	} {
		layer, err := layerOf(l.files, s.Created)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
			Created: v1.Time{Time: s.Created}, CreatedBy: "kaas imagebuild", Comment: l.comment,
		}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: s.Created}
	cf.Config = v1.Config{
		Entrypoint: s.Entrypoint,
		Cmd:        s.Cmd,
		User:       User,
		Env:        Env(),
		WorkingDir: HomeDir,
		Labels: map[string]string{
			"org.opencontainers.image.title":    s.Title,
			"org.opencontainers.image.version":  s.Version,
			"org.opencontainers.image.revision": s.Revision,
			"org.opencontainers.image.source":   s.Source,
			"org.opencontainers.image.created":  s.Created.UTC().Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// entry is one file, directory or symlink of a layer.
type entry struct {
	name     string // absolute path in the image
	mode     int64  // permission bits (plus sticky)
	dir      bool
	link     string // symlink target
	data     []byte
	uid, gid int
}

var lddLine = regexp.MustCompile(`^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)`)

// SharedLibraries lists what the dynamic loader maps for bin (`ldd`), the loader included, as
// the paths ldd prints (the files behind them are what goes in the image).
func SharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil // static: nothing to add
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, strings.TrimSpace(line))
		}
		if m := lddLine.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	return libs, nil
}

func runtimeTree(libs []string, caFile string) ([]entry, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	files := []entry{
		{name: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			fmt.Sprintf("nonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", NonrootUID, NonrootUID, HomeDir))},
		{name: "/etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\n" +
			fmt.Sprintf("nonroot:x:%d:\n", NonrootUID))},
		{name: "/etc/nsswitch.conf", mode: 0o644, data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
		{name: CABundle, mode: 0o644, data: ca},
		{name: "/tmp", dir: true, mode: 0o1777},
		{name: "/root", dir: true, mode: 0o700},
		{name: HomeDir, dir: true, mode: 0o700, uid: NonrootUID, gid: NonrootUID},
	}
	for _, lib := range libs {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		files = append(files, entry{name: lib, mode: 0o755, data: b})
	}
	return files, nil
}

// layerOf writes files (and their parent directories) as a reproducible gzipped tar: sorted, one
// timestamp, root-owned unless said otherwise.
func layerOf(files []entry, mtime time.Time) (v1.Layer, error) {
	all := map[string]entry{}
	for _, f := range files {
		all[f.name] = f
		for d := path.Dir(f.name); d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = entry{name: d, dir: true, mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		f := all[n]
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), Mode: f.mode, Uid: f.uid, Gid: f.gid,
			ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	gz := buf.Bytes()
	// The opener hands out the gzip stream as is: tarball recognises it as compressed, so the
	// layer is compressed once and its digest is that of these bytes.
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
