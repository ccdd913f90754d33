package kubelet

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The files of configMap, secret, downwardAPI and projected volumes are laid out as the real
// kubelet's atomic writer (pkg/volume/util/atomic_writer.go) lays them out, so that programs
// see what they would see on a real node:
//
//	<volume>/..2026_12_03_20_11_51.123456789/tls.crt   the files of one version (timestamped)
//	<volume>/..data -> ..2026_12_03_20_11_51.123456789 which version is current
//	<volume>/tls.crt -> ..data/tls.crt                 one link per top-level path of the payload
//
// An update writes a new timestamped directory, points a new `..data_tmp` link at it and renames
// that over `..data` (one atomic rename: a reader sees all old or all new files, and a file it
// holds open keeps its old bytes), then removes the links of paths that are gone and the old
// directory. Names starting with `..` are the writer's own.
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	tsDirFormat    = "..2006_01_02_15_04_05." // os.MkdirTemp appends a random suffix
)

// fileProjection is one file of a volume: its bytes and its mode.
type fileProjection struct {
	data []byte
	mode os.FileMode
}

// payload is a volume's files by path relative to the volume (items[].path or the key).
type payload map[string]fileProjection

// writeAtomic makes dir show exactly the files of p, as the kubelet's atomic writer does (see
// above). When the current version already holds the same files with the same bytes and modes,
// nothing is written. It reports whether a new version was written. Not safe for concurrent
// use on one dir (each pod's volumes are written by its worker alone).
func writeAtomic(dir string, p payload) (bool, error) {
	if err := validatePayload(p); err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	old, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil && !os.IsNotExist(err) {
		return false, err
	}
	var oldFiles []string
	if old != "" {
		oldFiles, err = listFiles(filepath.Join(dir, old))
		if err != nil && !os.IsNotExist(err) {
			return false, err
		}
		if err == nil && samePayload(filepath.Join(dir, old), oldFiles, p) {
			// The links exist already, unless an earlier write was interrupted.
			return false, linkVisible(dir, p)
		}
	}

	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format(tsDirFormat))
	if err != nil {
		return false, err
	}
	tsName := filepath.Base(ts)
	if err := os.Chmod(ts, 0o755); err != nil {
		_ = os.RemoveAll(ts)
		return false, err
	}
	if err := writeFiles(ts, p); err != nil {
		_ = os.RemoveAll(ts)
		return false, err
	}
	tmp := filepath.Join(dir, newDataDirName)
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) { // left by an interrupted write
		_ = os.RemoveAll(ts)
		return false, err
	}
	if err := os.Symlink(tsName, tmp); err != nil {
		_ = os.RemoveAll(ts)
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataDirName)); err != nil {
		_ = os.Remove(tmp)
		_ = os.RemoveAll(ts)
		return false, err
	}
	// Readers now get the new version through the links (those that exist already point at
	// ..data/<name>); new top-level names get their links, gone ones lose theirs.
	if err := linkVisible(dir, p); err != nil {
		return true, err
	}
	keep := topLevel(p)
	for _, f := range oldFiles {
		name := topName(f)
		if keep[name] {
			continue
		}
		link := filepath.Join(dir, name)
		// Only a link of ours: a directory a subPath mount created, say, stays.
		if got, err := os.Readlink(link); err == nil && got == filepath.Join(dataDirName, name) {
			if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
				return true, err
			}
		}
	}
	// Old versions (and any left by an interrupted write): every `..` directory but the new one.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, err
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "..") && e.Name() != tsName {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// validatePayload refuses paths that would leave the version directory or collide with the
// writer's own `..` names (the apiserver validates items' paths and keys the same way).
func validatePayload(p payload) error {
	for path := range p {
		switch {
		case path == "" || filepath.IsAbs(path):
			return fmt.Errorf("invalid path %q: must be relative", path)
		case filepath.Clean(path) != path:
			return fmt.Errorf("invalid path %q: must be clean", path)
		case strings.HasPrefix(path, ".."):
			return fmt.Errorf("invalid path %q: must not start with '..'", path)
		}
		for _, part := range strings.Split(path, "/") {
			if part == ".." {
				return fmt.Errorf("invalid path %q: must not contain '..'", path)
			}
		}
	}
	return nil
}

// listFiles returns the regular files under root, as paths relative to it.
func listFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

// samePayload reports whether version directory dir, holding files, has exactly p's files with
// p's bytes and modes. A file that cannot be read counts as different.
func samePayload(dir string, files []string, p payload) bool {
	if len(files) != len(p) {
		return false
	}
	for _, f := range files {
		want, ok := p[f]
		if !ok {
			return false
		}
		path := filepath.Join(dir, f)
		st, err := os.Lstat(path)
		if err != nil || st.Mode().Perm() != want.mode.Perm() {
			return false
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want.data) {
			return false
		}
	}
	return true
}

func writeFiles(dir string, p payload) error {
	for _, rel := range sortedKeys(p) {
		f := p[rel]
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.data, f.mode); err != nil {
			return err
		}
		// WriteFile's mode went through the umask.
		if err := os.Chmod(path, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// linkVisible gives each top-level name of p that has nothing under it yet its link
// `name -> ..data/name`. Like the real kubelet's writer it leaves alone whatever else is there
// (a link of an earlier version is the same link; anything else is not the writer's).
func linkVisible(dir string, p payload) error {
	for name := range topLevel(p) {
		path := filepath.Join(dir, name)
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			if err != nil {
				return err
			}
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), path); err != nil {
			return err
		}
	}
	return nil
}

func topLevel(p payload) map[string]bool {
	out := map[string]bool{}
	for path := range p {
		out[topName(path)] = true
	}
	return out
}

func topName(path string) string {
	name, _, _ := strings.Cut(path, "/")
	return name
}
