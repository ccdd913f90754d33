package kubelet

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"kaas/e2e/netns"
)

// PodInitArg is argv[1] of the process kubelet when it re-executes itself as a container's
// first process.
const PodInitArg = "pod-init"

const envPodInit = "KAAS_POD_INIT"

// initSpec is what the kubelet hands pod-init: mounts to make, then the program to become.
type initSpec struct {
	Hostname string   `json:"hostname"`
	Root     string   `json:"root"`    // an empty host directory that becomes the pod's root
	Scratch  string   `json:"scratch"` // where shadowed directories are kept reachable
	Mounts   []mount  `json:"mounts"`
	Dir      string   `json:"dir"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	// Netns, when set, is the pod's network namespace (a file under /run/netns) to run in.
	Netns string `json:"netns,omitempty"`
	// Image, when set, makes the root an overlay of an unpacked image instead of the host's /,
	// and the program runs as the image's (or the pod's) user.
	Image *imageRoot `json:"image,omitempty"`
}

// imageRoot is a container's root from an image: a writable overlay on the unpacked layers.
type imageRoot struct {
	RootFS string `json:"rootfs"` // lowerdir: the image store's unpacked layers (never written)
	Upper  string `json:"upper"`  // this container run's writable layer
	Work   string `json:"work"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Groups []int  `json:"groups"`
	// ReadOnly is securityContext.readOnlyRootFilesystem: the root is remounted read-only once
	// the volumes' mountpoints are made (volumes keep their own flags).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// PodInit runs in a fresh mount and UTS namespace (the kubelet starts it with CLONE_NEWNS |
// CLONE_NEWUTS, and Go makes `/` recursively private there, so no mount leaks to the host). It
// builds the pod's root (see makeRoot), sets the hostname, and execs the container's program,
// which keeps this PID: the PID the kubelet reports is the program's.
func PodInit() {
	if err := podInit(); err != nil {
		fmt.Fprintf(os.Stderr, "pod-init: %v\n", err)
		os.Exit(127)
	}
}

func podInit() error {
	var spec initSpec
	if err := json.Unmarshal([]byte(os.Getenv(envPodInit)), &spec); err != nil {
		return fmt.Errorf("decode spec: %w", err)
	}
	if spec.Netns != "" {
		// setns(2) moves only this thread into the pod's network namespace: keep the goroutine
		// on it, so that the exec below, which runs on it, starts the program there.
		runtime.LockOSThread()
		if err := netns.Enter(spec.Netns); err != nil {
			return err
		}
	}
	if err := syscall.Sethostname([]byte(spec.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	ppid := os.Getppid()
	if spec.Image != nil {
		if err := makeImageRoot(spec.Root, spec.Image, spec.Mounts); err != nil {
			return err
		}
	} else if err := makeRoot(spec.Root, spec.Scratch, spec.Mounts); err != nil {
		return err
	}
	if spec.Dir != "" {
		if err := os.MkdirAll(spec.Dir, 0o755); err != nil {
			return err
		}
		if err := os.Chdir(spec.Dir); err != nil {
			return err
		}
	}
	bin := spec.Argv[0]
	if filepath.Base(bin) == bin {
		// Look the program up in the container's PATH, not the kubelet's.
		os.Setenv("PATH", lookupEnv(spec.Env, "PATH"))
		p, err := exec.LookPath(bin)
		if err != nil {
			return err
		}
		bin = p
	}
	if im := spec.Image; im != nil {
		if err := syscall.Setgroups(im.Groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(im.GID); err != nil {
			return fmt.Errorf("setgid %d: %w", im.GID, err)
		}
		if err := syscall.Setuid(im.UID); err != nil {
			return fmt.Errorf("setuid %d: %w", im.UID, err)
		}
		// Changing the uid cleared the parent-death signal: set it again, so that a killed
		// kubelet still takes this container with it, and exit if the kubelet is gone already.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
			return fmt.Errorf("prctl: %w", err)
		}
		if os.Getppid() != ppid {
			return fmt.Errorf("the kubelet exited")
		}
	}
	return syscall.Exec(bin, spec.Argv, spec.Env)
}

// makeImageRoot mounts a writable overlay of the image on root, the kernel filesystems a
// container expects (/proc, the host's /dev and a read-only /sys), the pod's volumes at their
// mountPaths (mountpoints are created in the overlay, never in the image store or on the host),
// and pivots into it.
func makeImageRoot(root string, im *imageRoot, mounts []mount) error {
	for _, d := range []string{im.Upper, im.Work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", im.RootFS, im.Upper, im.Work)
	if err := syscall.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay root: %w", err)
	}
	kernel := []struct {
		target, source, fstype string
		flags                  uintptr
	}{
		{"/proc", "proc", "proc", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC},
		{"/dev", "/dev", "", syscall.MS_BIND | syscall.MS_REC},
		{"/sys", "/sys", "", syscall.MS_BIND | syscall.MS_REC},
	}
	for _, k := range kernel {
		dst := filepath.Join(root, k.target)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(k.source, dst, k.fstype, k.flags, ""); err != nil {
			return fmt.Errorf("mount %s: %w", k.target, err)
		}
	}
	if err := syscall.Mount("", filepath.Join(root, "sys"), "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("remount /sys read-only: %w", err)
	}
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Target < mounts[j].Target })
	for _, m := range mounts {
		st, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("mount source: %w", err)
		}
		dst, err := resolveParent(root, m.Target)
		if err != nil {
			return err
		}
		if err := makeMountpoint(dst, st.IsDir()); err != nil {
			return err
		}
		if err := bindMount(m, dst); err != nil {
			return err
		}
	}
	if err := pivot(root); err != nil {
		return err
	}
	if im.ReadOnly {
		if err := syscall.Mount("", "/", "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remount / read-only: %w", err)
		}
	}
	return nil
}

// makeRoot gives the pod a root that shows the host's files but where the pod's mountpoints can
// be created without touching the host: root becomes a tmpfs holding a bind mount (or symlink)
// per entry of the host's `/`, volumes are bind-mounted on top, and the process pivots into it.
// A mountPath whose parent is a host directory (/etc/config) "shadows" that directory the same
// way: a tmpfs with one bind per original entry, and the new mountpoint beside them.
func makeRoot(root, scratch string, mounts []mount) error {
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "mode=755"); err != nil {
		return fmt.Errorf("tmpfs root: %w", err)
	}
	if err := replicate("/", root); err != nil {
		return err
	}
	shadowed := map[string]bool{root: true} // directories that are our tmpfs: free to mkdir in
	var volumes []string                    // targets already mounted: mkdir writes into the volume
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Target < mounts[j].Target })
	for i, m := range mounts {
		st, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("mount source: %w", err)
		}
		dst, missing, err := resolveIn(root, m.Target)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			if !shadowed[dst] && !under(dst, volumes) {
				if err := shadow(dst, filepath.Join(scratch, fmt.Sprint(i))); err != nil {
					return err
				}
				shadowed[dst] = true
			}
			dst = filepath.Join(append([]string{dst}, missing...)...)
			if err := makeMountpoint(dst, st.IsDir()); err != nil {
				return err
			}
		}
		if err := bindMount(m, dst); err != nil {
			return err
		}
		volumes = append(volumes, dst)
	}
	return pivot(root)
}

func bindMount(m mount, dst string) error {
	if err := syscall.Mount(m.Source, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY | syscall.MS_REC)
		if err := syscall.Mount("", dst, "", flags, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// pivot makes root the process' root and detaches the old one.
func pivot(root string) error {
	old := filepath.Join(root, ".oldroot")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := syscall.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := syscall.Unmount("/.oldroot", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return os.Remove("/.oldroot")
}

// replicate fills the (empty, tmpfs) directory dst with one entry per entry of src: a recursive
// bind mount for directories and files, the same symlink for symlinks.
func replicate(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			link, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, to); err != nil {
				return err
			}
			continue
		}
		if err := makeMountpoint(to, e.IsDir()); err != nil {
			return err
		}
		if err := syscall.Mount(from, to, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", from, err)
		}
	}
	return nil
}

// shadow replaces dir (inside the pod root) by a tmpfs that shows the same entries, keeping the
// original reachable through a bind at save (in the pod's scratch directory).
func shadow(dir, save string) error {
	if err := os.MkdirAll(save, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount(dir, save, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=%o", st.Mode().Perm())
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", dir, err)
	}
	return replicate(save, dir)
}

// resolveIn resolves path inside root as the pod will see it (absolute symlinks lead back into
// root, not to the host), up to the first missing component. It returns the deepest existing
// directory and the components still missing below it.
func resolveIn(root, path string) (string, []string, error) {
	parts := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	cur := root
	for hops := 0; len(parts) > 0; {
		p := parts[0]
		if p == "" || p == "." {
			parts = parts[1:]
			continue
		}
		if p == ".." {
			if cur != root {
				cur = filepath.Dir(cur)
			}
			parts = parts[1:]
			continue
		}
		next := filepath.Join(cur, p)
		st, err := os.Lstat(next)
		if os.IsNotExist(err) {
			return cur, parts, nil
		}
		if err != nil {
			return "", nil, err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			if hops++; hops > 40 {
				return "", nil, fmt.Errorf("%s: too many symlinks", path)
			}
			link, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if filepath.IsAbs(link) {
				cur = root
			}
			parts = append(strings.Split(strings.Trim(link, "/"), "/"), parts[1:]...)
			continue
		}
		cur, parts = next, parts[1:]
	}
	return cur, nil, nil
}

func makeMountpoint(path string, dir bool) error {
	if dir {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

func lookupEnv(env []string, name string) string {
	for _, kv := range env {
		if len(kv) > len(name) && kv[:len(name)] == name && kv[len(name)] == '=' {
			return kv[len(name)+1:]
		}
	}
	return ""
}
