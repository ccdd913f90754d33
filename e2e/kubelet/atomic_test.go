package kubelet

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dirNames lists dir's entries, `..` ones included.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// dataTarget is where `..data` points, failing unless it is a symlink to a timestamped directory.
func dataTarget(t *testing.T, dir string) string {
	t.Helper()
	st, err := os.Lstat(filepath.Join(dir, dataDirName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s is not a symlink: %v", dataDirName, st.Mode())
	}
	target, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(target, "..20") || strings.Contains(target, "/") {
		t.Fatalf("%s -> %q, want a timestamped directory beside it", dataDirName, target)
	}
	return target
}

// The kubelet's layout: files in a timestamped directory, `..data` pointing at it, one link per
// top-level path; an unchanged payload writes nothing; a change swaps `..data`, removes what is
// gone, and a reader holding an old file open keeps reading the old bytes.
func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	first := payload{
		"tls.crt":       {data: []byte("cert one"), mode: 0o644},
		"tls.key":       {data: []byte("key one"), mode: 0o400},
		"conf/app.yaml": {data: []byte("a: 1"), mode: 0o640},
	}
	changed, err := writeAtomic(dir, first)
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	v1 := dataTarget(t, dir)
	if got, want := dirNames(t, dir), []string{dataDirName, v1, "conf", "tls.crt", "tls.key"}; strings.Join(got, " ") != strings.Join(sorted(want), " ") {
		t.Fatalf("entries %v, want %v", got, sorted(want))
	}
	for _, name := range []string{"tls.crt", "tls.key", "conf"} {
		if link, err := os.Readlink(filepath.Join(dir, name)); err != nil || link != filepath.Join(dataDirName, name) {
			t.Errorf("%s -> %q (%v), want %s", name, link, err, filepath.Join(dataDirName, name))
		}
	}
	if got := readFile(t, filepath.Join(dir, "conf", "app.yaml")); got != "a: 1" {
		t.Errorf("conf/app.yaml = %q", got)
	}
	for path, want := range map[string]os.FileMode{"tls.crt": 0o644, "tls.key": 0o400, "conf/app.yaml": 0o640} {
		if st, err := os.Stat(filepath.Join(dir, path)); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}

	// The same payload again: nothing is written.
	before := dirNames(t, dir)
	st1, err := os.Stat(filepath.Join(dir, v1))
	if err != nil {
		t.Fatal(err)
	}
	changed, err = writeAtomic(dir, payload{
		"tls.crt":       {data: []byte("cert one"), mode: 0o644},
		"tls.key":       {data: []byte("key one"), mode: 0o400},
		"conf/app.yaml": {data: []byte("a: 1"), mode: 0o640},
	})
	if err != nil || changed {
		t.Fatalf("unchanged write: changed=%v err=%v", changed, err)
	}
	if after := dirNames(t, dir); strings.Join(after, " ") != strings.Join(before, " ") || dataTarget(t, dir) != v1 {
		t.Fatalf("unchanged write changed the directory: %v -> %v", before, after)
	}
	if st, err := os.Stat(filepath.Join(dir, v1)); err != nil || !st.ModTime().Equal(st1.ModTime()) {
		t.Fatalf("unchanged write touched %s", v1)
	}

	// A renewal: new bytes, tls.key and conf gone, ca.crt new.
	held, err := os.Open(filepath.Join(dir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	changed, err = writeAtomic(dir, payload{
		"tls.crt": {data: []byte("cert two"), mode: 0o644},
		"ca.crt":  {data: []byte("ca two"), mode: 0o644},
	})
	if err != nil || !changed {
		t.Fatalf("renewal: changed=%v err=%v", changed, err)
	}
	v2 := dataTarget(t, dir)
	if v2 == v1 {
		t.Fatalf("%s still points at %s", dataDirName, v1)
	}
	if got := readFile(t, filepath.Join(dir, "tls.crt")); got != "cert two" {
		t.Errorf("tls.crt = %q after the renewal", got)
	}
	if got := readFile(t, filepath.Join(dir, "ca.crt")); got != "ca two" {
		t.Errorf("ca.crt = %q after the renewal", got)
	}
	if old, err := io.ReadAll(held); err != nil || string(old) != "cert one" {
		t.Errorf("the file held open reads %q (%v), want the old bytes", old, err)
	}
	if got, want := dirNames(t, dir), sorted([]string{dataDirName, v2, "ca.crt", "tls.crt"}); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("entries %v after the renewal, want %v (old version and links of gone paths removed)", got, want)
	}

	// A mode change alone is a change too.
	if changed, err := writeAtomic(dir, payload{
		"tls.crt": {data: []byte("cert two"), mode: 0o600},
		"ca.crt":  {data: []byte("ca two"), mode: 0o644},
	}); err != nil || !changed {
		t.Errorf("mode change: changed=%v err=%v", changed, err)
	}

	// An empty payload (an optional object that is gone) leaves `..data` and no files.
	if changed, err := writeAtomic(dir, payload{}); err != nil || !changed {
		t.Errorf("empty payload: changed=%v err=%v", changed, err)
	}
	if got := dirNames(t, dir); len(got) != 2 || got[1] != dataDirName || got[0] != dataTarget(t, dir) {
		t.Errorf("entries %v for an empty payload, want ..data and its directory", got)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// Paths that would leave the volume or collide with the writer's names are refused, and nothing
// is written.
func TestWriteAtomicRefusesBadPaths(t *testing.T) {
	for _, path := range []string{"../escape", "/abs", "..data", "..2026", "a/../../b", "a/", ""} {
		dir := filepath.Join(t.TempDir(), "vol")
		if _, err := writeAtomic(dir, payload{path: {data: []byte("x"), mode: 0o644}}); err == nil {
			t.Errorf("path %q accepted", path)
		}
		if _, err := os.Lstat(filepath.Join(dir, dataDirName)); !os.IsNotExist(err) {
			t.Errorf("path %q: %s written", path, dataDirName)
		}
	}
}

// The resync loop against a fake apiserver: a changed Secret is swapped in within a few periods,
// a deleted one leaves the files in place (and is reported, not fatal), a deleted optional
// ConfigMap empties its volume, and a recreated Secret is picked up again.
func TestResyncVolumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"},
			Data: map[string][]byte{"tls.crt": []byte("cert one"), "tls.key": []byte("key one")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "opt"},
			Data: map[string]string{"greeting": "hello"}},
	)
	// Events are caught here (the fake clientset does not fill in generateName).
	var mu sync.Mutex
	var events []string
	client.PrependReactor("create", "events", func(action k8stesting.Action) (bool, runtime.Object, error) {
		e := action.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		mu.Lock()
		events = append(events, e.Reason+": "+e.Message)
		mu.Unlock()
		return true, e, nil
	})
	root := t.TempDir()
	k := &Kubelet{cfg: Config{RootDir: root, LogDir: root, NodeName: "n", VolumeResync: 20 * time.Millisecond}, client: client}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c"}},
			Volumes: []corev1.Volume{
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: "tls", DefaultMode: ptr.To[int32](0o440),
					Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "private/tls.key", Mode: ptr.To[int32](0o400)}},
				}}},
				{Name: "opt", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "opt"}, Optional: ptr.To(true),
				}}},
			},
		},
	}
	w := newPodWorker(k, pod)
	vols, err := w.prepareVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tls, opt := vols["tls"], vols["opt"]
	if got := readFile(t, filepath.Join(tls, "tls.crt")); got != "cert one" {
		t.Fatalf("tls.crt = %q", got)
	}
	if st, err := os.Stat(filepath.Join(tls, "private", "tls.key")); err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("private/tls.key: %v %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(tls, "tls.crt")); err != nil || st.Mode().Perm() != 0o440 {
		t.Fatalf("tls.crt: %v %v", st, err)
	}
	v1 := dataTarget(t, tls)
	stop := w.startResync(ctx)
	defer stop()

	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	// Several passes over unchanged objects write nothing.
	time.Sleep(100 * time.Millisecond)
	if got := dataTarget(t, tls); got != v1 {
		t.Fatalf("an unchanged Secret was rewritten: %s -> %s", v1, got)
	}

	secrets := client.CoreV1().Secrets("ns")
	s, err := secrets.Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{"tls.crt": []byte("cert two"), "tls.key": []byte("key two")}
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("the renewed Secret", func() bool {
		b, _ := os.ReadFile(filepath.Join(tls, "private", "tls.key"))
		return string(b) == "key two"
	})
	if got := readFile(t, filepath.Join(tls, "tls.crt")); got != "cert two" {
		t.Errorf("tls.crt = %q with tls.key renewed", got)
	}
	if dataTarget(t, tls) == v1 {
		t.Errorf("%s did not move", dataDirName)
	}

	// Gone: the last files stay, the error is reported as an event.
	if err := secrets.Delete(ctx, "tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().ConfigMaps("ns").Delete(ctx, "opt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("the optional ConfigMap's files removed", func() bool {
		_, err := os.Lstat(filepath.Join(opt, "greeting"))
		return os.IsNotExist(err)
	})
	eventually("a FailedMount event for the missing Secret", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if strings.HasPrefix(e, "FailedMount: ") && strings.Contains(e, `secret "tls" not found`) {
				return true
			}
		}
		return false
	})
	if got := readFile(t, filepath.Join(tls, "tls.crt")); got != "cert two" {
		t.Errorf("tls.crt = %q after the Secret was deleted, want the last content", got)
	}

	// Back again: picked up.
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"},
		Data: map[string][]byte{"tls.crt": []byte("cert three"), "tls.key": []byte("key three")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("the recreated Secret", func() bool {
		b, _ := os.ReadFile(filepath.Join(tls, "tls.crt"))
		return string(b) == "cert three"
	})
	stop()
}
