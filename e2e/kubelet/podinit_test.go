package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// resolveIn must follow symlinks inside the pod root (an absolute link leads back to the root,
// not to the host) and stop at the first missing component.
func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "run", "lock"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "var"), 0o755))
	must(os.Symlink("/run", filepath.Join(root, "var", "run")))
	must(os.Symlink("lock", filepath.Join(root, "run", "l")))
	for _, tc := range []struct{ path, dir, missing string }{
		{"/var/run/secrets/kubernetes.io", "/run", "secrets/kubernetes.io"},
		{"/var/run/lock", "/run/lock", ""},
		{"/run/l/x", "/run/lock", "x"},
		{"/data", "", "data"},
		{"/var/../run", "/run", ""},
	} {
		dir, missing, err := resolveIn(root, tc.path)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if dir != root+tc.dir || strings.Join(missing, "/") != tc.missing {
			t.Errorf("resolveIn(%s) = %s, %q; want %s, %q", tc.path, dir, missing, root+tc.dir, tc.missing)
		}
	}
	must(os.Symlink("loop", filepath.Join(root, "loop")))
	if _, _, err := resolveIn(root, "/loop/x"); err == nil {
		t.Errorf("a symlink loop resolved")
	}
}

func TestMapPath(t *testing.T) {
	f := filepath.Join(t.TempDir(), "paths.json")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(f, []byte(`{"/h/volumes/shared": "/mnt/node-1", "/h/volumes/shared/deep": "/mnt/deep"}`), 0o644))
	k := &Kubelet{cfg: Config{PathMapFile: f}}
	for in, want := range map[string]string{
		"/h/volumes/shared":        "/mnt/node-1",
		"/h/volumes/shared/x":      "/mnt/node-1/x",
		"/h/volumes/shared/deep/y": "/mnt/deep/y",
		"/h/volumes/sharedother":   "/h/volumes/sharedother",
	} {
		got, err := k.mapPath(in)
		if err != nil || got != want {
			t.Errorf("mapPath(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}
