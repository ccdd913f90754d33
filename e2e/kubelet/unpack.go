package kubelet

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// applyLayer extracts one uncompressed layer (a tar stream) onto root, as the OCI image spec's
// changeset rules say: `.wh.<name>` deletes <name> from the layers below, `.wh..wh..opq` empties
// its directory of what the layers below put there, an entry replaces whatever was at its path
// (a directory over a directory merges). No entry can write outside root: every parent
// component is resolved inside root (an absolute symlink leads back to root) and the final
// component is never followed.
func applyLayer(root string, r io.Reader) error {
	tr := tar.NewReader(r)
	thisLayer := map[string]bool{} // paths this layer created (an opaque marker keeps them)
	type dirTime struct {
		path string
		hdr  *tar.Header
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + hdr.Name)
		if name == "/" {
			continue
		}
		dir, base := path.Split(name)
		parent, err := resolveParent(root, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		switch {
		case base == whiteoutOpaque:
			entries, err := os.ReadDir(parent)
			if err != nil && !os.IsNotExist(err) {
				return err
			}
			for _, e := range entries {
				if !thisLayer[path.Join(dir, e.Name())] {
					if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
						return err
					}
				}
			}
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			if err := os.RemoveAll(filepath.Join(parent, strings.TrimPrefix(base, whiteoutPrefix))); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
		target := filepath.Join(parent, base)
		if st, err := os.Lstat(target); err == nil && !(st.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		mode := uint32(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o755); err != nil && !os.IsExist(err) {
				return err
			}
			dirs = append(dirs, dirTime{target, hdr})
		case tar.TypeReg, tar.TypeRegA:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			lp, err := resolveParent(root, path.Dir(path.Clean("/"+hdr.Linkname)))
			if err != nil {
				return fmt.Errorf("%s: link target: %w", hdr.Name, err)
			}
			if err := os.Link(filepath.Join(lp, path.Base(hdr.Linkname)), target); err != nil {
				return err
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
			dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
			if err := unix.Mknod(target, kind|mode, int(dev)); err != nil {
				return err
			}
		default:
			continue // pax/GNU metadata entries are consumed by archive/tar; anything else is skipped
		}
		thisLayer[name] = true
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeSymlink {
			continue
		}
		if hdr.Typeflag != tar.TypeLink {
			// After chown, which clears set-id bits.
			if err := unix.Chmod(target, mode); err != nil {
				return err
			}
		}
		if hdr.Typeflag != tar.TypeDir {
			_ = os.Chtimes(target, hdr.AccessTime, hdr.ModTime)
		}
	}
	// Directory times last: creating their entries changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Chtimes(dirs[i].path, dirs[i].hdr.AccessTime, dirs[i].hdr.ModTime)
	}
	return nil
}

// resolveParent is the host path of directory dir inside root, its existing part resolved as
// the container will see it (resolveIn) and its missing part appended.
func resolveParent(root, dir string) (string, error) {
	cur, missing, err := resolveIn(root, dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{cur}, missing...)...), nil
}

// imageUser resolves the user a container runs as: the pod's or container's runAsUser and
// runAsGroup win over the image's USER (a number or a name in the image's /etc/passwd, with an
// optional :group); the home directory comes from /etc/passwd ("/" if the uid is not listed).
func imageUser(rootfs, user string, runAsUser, runAsGroup *int64) (uid, gid int, home string, err error) {
	u, g, hasGroup := strings.Cut(user, ":")
	passwd := readColonFile(filepath.Join(rootfs, "etc", "passwd"))
	home = "/"
	if u == "" {
		u = "0"
	}
	if n, e := strconv.Atoi(u); e == nil {
		uid = n
		for _, f := range passwd {
			if len(f) > 5 && f[2] == u {
				gid, _ = strconv.Atoi(f[3])
				home = f[5]
				break
			}
		}
	} else {
		found := false
		for _, f := range passwd {
			if len(f) > 5 && f[0] == u {
				uid, _ = strconv.Atoi(f[2])
				gid, _ = strconv.Atoi(f[3])
				home, found = f[5], true
				break
			}
		}
		if !found {
			return 0, 0, "", fmt.Errorf("unable to find user %s: no matching entries in passwd file", u)
		}
	}
	if hasGroup {
		if n, e := strconv.Atoi(g); e == nil {
			gid = n
		} else {
			found := false
			for _, f := range readColonFile(filepath.Join(rootfs, "etc", "group")) {
				if len(f) > 2 && f[0] == g {
					gid, _ = strconv.Atoi(f[2])
					found = true
					break
				}
			}
			if !found {
				return 0, 0, "", fmt.Errorf("unable to find group %s: no matching entries in group file", g)
			}
		}
	}
	if runAsUser != nil {
		uid = int(*runAsUser)
		if !hasGroup && runAsGroup == nil {
			gid = 0 // as containerd: a runAsUser without a group runs with gid 0 unless passwd says
			for _, f := range passwd {
				if len(f) > 5 && f[2] == strconv.Itoa(uid) {
					gid, _ = strconv.Atoi(f[3])
					home = f[5]
				}
			}
		}
	}
	if runAsGroup != nil {
		gid = int(*runAsGroup)
	}
	return uid, gid, home, nil
}

func readColonFile(file string) [][]string {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, strings.Split(l, ":"))
		}
	}
	return out
}
