package kubelet

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

type tarEntry struct {
	name, link string
	typ        byte
	data       string
	mode       int64
	uid        int
}

func layerTar(t *testing.T, entries ...tarEntry) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			Size: int64(len(e.data)), ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.data))
		}
	}
	tw.Close()
	return bytes.NewReader(buf.Bytes())
}

// Layers stack as the OCI image spec says: whiteouts delete from lower layers, an opaque
// directory hides what the lower layers put in it but keeps what its own layer adds, symlinks
// are recreated as they are, and nothing is ever written outside the root, whatever names and
// symlinks a layer holds.
func TestApplyLayer(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(applyLayer(root, layerTar(t,
		tarEntry{name: "a/", typ: tar.TypeDir},
		tarEntry{name: "a/x", data: "x"},
		tarEntry{name: "a/y", data: "y"},
		tarEntry{name: "b/", typ: tar.TypeDir},
		tarEntry{name: "b/z", data: "z"},
		tarEntry{name: "b/sub/", typ: tar.TypeDir},
		tarEntry{name: "b/sub/deep", data: "deep"},
		tarEntry{name: "rel", typ: tar.TypeSymlink, link: "a/y"},
		tarEntry{name: "abs", typ: tar.TypeSymlink, link: "/b"},
		tarEntry{name: "out", typ: tar.TypeSymlink, link: outside},
		tarEntry{name: "up", typ: tar.TypeSymlink, link: "../../../.."},
		tarEntry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		tarEntry{name: "home/nonroot/", typ: tar.TypeDir, mode: 0o700, uid: 65532},
		tarEntry{name: "bin/tool", data: "#!", mode: 0o755},
		tarEntry{name: "bin/hard", typ: tar.TypeLink, link: "bin/tool"},
		tarEntry{name: "c", data: "a file, later a directory"},
	)))
	must(applyLayer(root, layerTar(t,
		tarEntry{name: "a/.wh.x"},
		tarEntry{name: "b/", typ: tar.TypeDir},
		tarEntry{name: "b/new", data: "new"},
		tarEntry{name: "b/.wh..wh..opq"},
		tarEntry{name: "abs/through", data: "via /b"}, // an absolute symlink stays inside root
		tarEntry{name: "out/escaped", data: "no"},     // ... even when it names a host path
		tarEntry{name: "up/escaped", data: "no"},      // a relative one cannot climb out
		tarEntry{name: "../../escaped", data: "no"},   // nor can a name
		tarEntry{name: "rel", data: "a file replaces the symlink"},
		tarEntry{name: "c/", typ: tar.TypeDir}, // a directory replaces the file
		tarEntry{name: "c/inside", data: "inside"},
	)))
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	gone := func(p string) bool { _, err := os.Lstat(filepath.Join(root, p)); return os.IsNotExist(err) }
	if !gone("a/x") || read("a/y") != "y" {
		t.Errorf("whiteout: a/x gone=%v, a/y=%q", gone("a/x"), read("a/y"))
	}
	if !gone("b/z") || !gone("b/sub") || read("b/new") != "new" {
		t.Errorf("opaque: b/z gone=%v, b/sub gone=%v, b/new=%q", gone("b/z"), gone("b/sub"), read("b/new"))
	}
	if read("b/through") != "via /b" {
		t.Errorf("abs/through landed elsewhere: b/through=%q", read("b/through"))
	}
	if link, err := os.Readlink(filepath.Join(root, "out")); err != nil || link != outside {
		t.Errorf("symlink out = %q, %v", link, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a layer wrote outside the root: %v", entries)
	}
	if read(filepath.Join(strings.TrimPrefix(outside, "/"), "escaped")) != "no" || read("escaped") != "no" {
		t.Errorf("the escaping entries should land inside the root: %q %q",
			read(filepath.Join(strings.TrimPrefix(outside, "/"), "escaped")), read("escaped"))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "escaped")); err == nil {
		t.Errorf("../../escaped escaped")
	}
	if st, err := os.Lstat(filepath.Join(root, "rel")); err != nil || !st.Mode().IsRegular() || read("a/y") != "y" {
		t.Errorf("rel should be a file now and a/y untouched: %v %v %q", st, err, read("a/y"))
	}
	if read("c/inside") != "inside" {
		t.Errorf("c/inside = %q", read("c/inside"))
	}
	st, err := os.Stat(filepath.Join(root, "tmp"))
	if err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("/tmp mode %v, %v", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(root, "home", "nonroot")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 65532 {
		t.Errorf("home owner: %v", err)
	}
	a, _ := os.Stat(filepath.Join(root, "bin", "tool"))
	b, _ := os.Stat(filepath.Join(root, "bin", "hard"))
	if a == nil || b == nil || !os.SameFile(a, b) || a.Mode().Perm() != 0o755 {
		t.Errorf("hard link: %v %v", a, b)
	}
}

// testRegistry serves go-containerregistry's registry and counts manifest requests.
func testRegistry(t *testing.T) (host string, manifests *atomic.Int32) {
	manifests = &atomic.Int32{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") {
			manifests.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), manifests
}

func pushRandom(t *testing.T, ref string, cfg v1.Config) v1.Image {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	r, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return img
}

func reasonOf(err error) string {
	var pe *pullError
	if errors.As(err, &pe) {
		return pe.reason
	}
	return ""
}

// imagePullPolicy as the kubelet honours it: Never uses only the cache, IfNotPresent pulls once,
// Always asks the registry every time and unpacks only a new digest; a missing image or a bad
// name fail with the kubelet's reasons; a mirror serves another registry's names.
func TestPullPolicy(t *testing.T) {
	host, manifests := testRegistry(t)
	ctx := context.Background()
	s, err := newImageStore(t.TempDir(), map[string]string{"ghcr.io": host})
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/kaas/app:1"
	first := pushRandom(t, ref, v1.Config{Entrypoint: []string{"/app"}, User: "65532"})
	firstDigest, _ := first.Digest()

	if _, err := s.ensure(ctx, ref, corev1.PullNever); reasonOf(err) != "ErrImageNeverPull" ||
		!strings.Contains(err.Error(), "is not present with pull policy of Never") {
		t.Fatalf("Never before a pull: %v (%s)", err, reasonOf(err))
	}
	img, err := s.ensure(ctx, ref, corev1.PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != firstDigest.String() || img.ID != host+"/kaas/app@"+firstDigest.String() ||
		!reflect.DeepEqual(img.Config.Entrypoint, []string{"/app"}) {
		t.Fatalf("pulled %+v", img)
	}
	marker := filepath.Join(img.RootFS, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n := manifests.Load()
	for _, p := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
		if again, err := s.ensure(ctx, ref, p); err != nil || again.Digest != img.Digest {
			t.Fatalf("%s: %v %v", p, again, err)
		}
	}
	if manifests.Load() != n {
		t.Errorf("IfNotPresent/Never of a cached image asked the registry")
	}
	if again, err := s.ensure(ctx, ref, corev1.PullAlways); err != nil || again.Digest != img.Digest {
		t.Fatalf("Always: %v %v", again, err)
	}
	if manifests.Load() == n {
		t.Errorf("Always did not ask the registry")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("Always unpacked an unchanged image again: %v", err)
	}

	// The tag moves: Always follows it, IfNotPresent keeps what it has.
	second := pushRandom(t, ref, v1.Config{Entrypoint: []string{"/app2"}})
	secondDigest, _ := second.Digest()
	if got, err := s.ensure(ctx, ref, corev1.PullIfNotPresent); err != nil || got.Digest != firstDigest.String() {
		t.Errorf("IfNotPresent after the tag moved: %v %v", got, err)
	}
	if got, err := s.ensure(ctx, ref, corev1.PullAlways); err != nil || got.Digest != secondDigest.String() ||
		got.Config.Entrypoint[0] != "/app2" {
		t.Errorf("Always after the tag moved: %v %v", got, err)
	}
	// A digest reference is cached by its digest.
	if got, err := s.ensure(ctx, host+"/kaas/app@"+firstDigest.String(), corev1.PullNever); err != nil || got.Digest != firstDigest.String() {
		t.Errorf("by digest: %v %v", got, err)
	}
	// A restarted kubelet finds its images.
	s2, _ := newImageStore(s.dir, nil)
	if got, err := s2.ensure(ctx, ref, corev1.PullNever); err != nil || got.Digest != secondDigest.String() {
		t.Errorf("after a restart: %v %v", got, err)
	}

	// ghcr.io is mirrored by the test registry; the status shows the name the pod asked for.
	if got, err := s.ensure(ctx, "ghcr.io/kaas/app:1", corev1.PullIfNotPresent); err != nil ||
		got.ID != "ghcr.io/kaas/app@"+secondDigest.String() {
		t.Errorf("mirror: %v %v", got, err)
	}

	if _, err := s.ensure(ctx, host+"/kaas/missing:1", corev1.PullIfNotPresent); reasonOf(err) != "ErrImagePull" ||
		!strings.Contains(err.Error(), `failed to pull and unpack image "`+host+`/kaas/missing:1"`) {
		t.Errorf("missing image: %v (%s)", err, reasonOf(err))
	}
	if _, err := s.ensure(ctx, "Bad::Name", corev1.PullIfNotPresent); reasonOf(err) != "InvalidImageName" {
		t.Errorf("bad name: %v (%s)", err, reasonOf(err))
	}
	if got := defaultPullPolicy("x/y"); got != corev1.PullAlways {
		t.Errorf("default policy without a tag: %s", got)
	}
	if got := defaultPullPolicy("x/y:1"); got != corev1.PullIfNotPresent {
		t.Errorf("default policy with a tag: %s", got)
	}
}

// A container whose image cannot be pulled waits with ErrImagePull, then ImagePullBackOff with
// the kubelet's message, and keeps retrying until the pod stops.
func TestImagePullBackOff(t *testing.T) {
	host, manifests := testRegistry(t)
	s, err := newImageStore(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	image := host + "/kaas/missing:1"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "c", Image: image}}}}
	k := &Kubelet{images: imageTable{}, store: s}
	w := newPodWorker(k, pod)
	c := w.containers[0]
	done := make(chan struct{})
	go func() { defer close(done); c.supervise(context.Background()) }()
	seen := map[string]string{}
	deadline := time.Now().Add(10 * time.Second)
	for seen["ImagePullBackOff"] == "" && time.Now().Before(deadline) {
		w.mu.Lock()
		if c.waiting != nil {
			seen[c.waiting.Reason] = c.waiting.Message
		}
		w.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	w.stop(0, true)
	<-done
	if !strings.Contains(seen["ErrImagePull"], `failed to pull and unpack image "`+image+`"`) {
		t.Errorf("ErrImagePull: %q (seen %v)", seen["ErrImagePull"], seen)
	}
	if !strings.HasPrefix(seen["ImagePullBackOff"], `Back-off pulling image "`+image+`": ErrImagePull: `) {
		t.Errorf("ImagePullBackOff: %q (seen %v)", seen["ImagePullBackOff"], seen)
	}
	if manifests.Load() == 0 {
		t.Errorf("never asked the registry")
	}
	if c.restartCount != 0 {
		t.Errorf("failed pulls counted as restarts: %d", c.restartCount)
	}
}

func TestImageUser(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc", "group"), []byte("root:x:0:\nnonroot:x:65532:\nstaff:x:50:\n"), 0o644)
	for _, tc := range []struct {
		user          string
		runAs, group  *int64
		uid, gid      int
		home, problem string
	}{
		{user: "", uid: 0, gid: 0, home: "/root"},
		{user: "65532", uid: 65532, gid: 65532, home: "/home/nonroot"},
		{user: "65532:65532", uid: 65532, gid: 65532, home: "/home/nonroot"},
		{user: "nonroot", uid: 65532, gid: 65532, home: "/home/nonroot"},
		{user: "nonroot:staff", uid: 65532, gid: 50, home: "/home/nonroot"},
		{user: "1234", uid: 1234, gid: 0, home: "/"},
		{user: "65532", runAs: ptr.To[int64](1000), uid: 1000, gid: 0, home: "/home/nonroot"},
		{user: "65532", runAs: ptr.To[int64](1000), group: ptr.To[int64](2000), uid: 1000, gid: 2000, home: "/home/nonroot"},
		{user: "nobody", problem: "unable to find user nobody"},
		{user: "nonroot:nogroup", problem: "unable to find group nogroup"},
	} {
		uid, gid, home, err := imageUser(root, tc.user, tc.runAs, tc.group)
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%q: err %v, want %q", tc.user, err, tc.problem)
			}
			continue
		}
		if err != nil || uid != tc.uid || gid != tc.gid || home != tc.home {
			t.Errorf("%q runAs %v/%v: %d %d %s %v; want %d %d %s", tc.user, tc.runAs, tc.group, uid, gid, home, err, tc.uid, tc.gid, tc.home)
		}
	}
}

func TestContainerArgv(t *testing.T) {
	cfg := v1.Config{Entrypoint: []string{"/kaas-operator"}, Cmd: []string{"run"}}
	for _, tc := range []struct{ command, args, want []string }{
		{nil, nil, []string{"/kaas-operator", "run"}},
		{nil, []string{"volume-agent"}, []string{"/kaas-operator", "volume-agent"}},
		{[]string{"/kaas-operator", "volume-agent"}, nil, []string{"/kaas-operator", "volume-agent"}},
		{[]string{"sh"}, []string{"-c", "x"}, []string{"sh", "-c", "x"}},
	} {
		if got := containerArgv(cfg, tc.command, tc.args); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("command %q args %q: %q, want %q", tc.command, tc.args, got, tc.want)
		}
	}
}
