package imagebuild

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Dockerfile is what the final stage of a Dockerfile declares about the runtime.
type Dockerfile struct {
	From       string
	User       string
	Workdir    string
	Entrypoint []string
	Cmd        []string
	Env        map[string]string
	Copies     []string // COPY/ADD destinations
}

// ParseDockerfile reads the final stage of a Dockerfile (line continuations, comments, exec-form
// JSON arrays and shell form, `ENV k=v ...` and `ENV k v`).
func ParseDockerfile(file string) (*Dockerfile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var d *Dockerfile
	var logical []string
	cur := ""
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") || (t == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		logical = append(logical, cur+t)
		cur = ""
	}
	for _, l := range logical {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			d = &Dockerfile{From: strings.Fields(rest)[0], Env: map[string]string{}}
			continue
		}
		if d == nil {
			continue // ARG before FROM
		}
		switch strings.ToUpper(instr) {
		case "USER":
			d.User = rest
		case "WORKDIR":
			d.Workdir = rest
		case "ENTRYPOINT":
			if d.Entrypoint, err = words(rest); err != nil {
				return nil, fmt.Errorf("%s: ENTRYPOINT: %w", file, err)
			}
			d.Cmd = nil // as in Docker: a new ENTRYPOINT resets CMD
		case "CMD":
			if d.Cmd, err = words(rest); err != nil {
				return nil, fmt.Errorf("%s: CMD: %w", file, err)
			}
		case "ENV":
			if !strings.Contains(strings.Fields(rest)[0], "=") {
				k, v, _ := strings.Cut(rest, " ")
				d.Env[k] = strings.TrimSpace(v)
				break
			}
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				d.Env[k] = strings.Trim(v, `"`)
			}
		case "COPY", "ADD":
			var args []string
			for _, f := range strings.Fields(rest) {
				if !strings.HasPrefix(f, "--") {
					args = append(args, f)
				}
			}
			if len(args) >= 2 {
				d.Copies = append(d.Copies, args[len(args)-1])
			}
		}
	}
	if d == nil {
		return nil, fmt.Errorf("%s: no FROM", file)
	}
	return d, nil
}

// words parses an exec-form JSON array, or else a shell-form command as Docker runs it.
func words(s string) ([]string, error) {
	if strings.HasPrefix(s, "[") {
		var out []string
		return out, json.Unmarshal([]byte(s), &out)
	}
	return []string{"/bin/sh", "-c", s}, nil
}

// Verify checks that img has the runtime layout df declares, and that the image can run its
// entrypoint: user, entrypoint and command, working directory, environment, the copied files,
// the CA bundle SSL_CERT_FILE names, the user in /etc/passwd, a writable /tmp, and the
// entrypoint's ELF interpreter and every library it needs. It returns every mismatch.
func Verify(img v1.Image, df *Dockerfile) ([]string, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	fs, err := ReadFiles(img)
	if err != nil {
		return nil, err
	}
	var bad []string
	fail := func(f string, a ...any) { bad = append(bad, fmt.Sprintf(f, a...)) }
	c := cf.Config
	if c.User != df.User {
		fail("user %q, the Dockerfile says %q", c.User, df.User)
	}
	if !reflect.DeepEqual(nonNil(c.Entrypoint), nonNil(df.Entrypoint)) {
		fail("entrypoint %q, the Dockerfile says %q", c.Entrypoint, df.Entrypoint)
	}
	if !reflect.DeepEqual(nonNil(c.Cmd), nonNil(df.Cmd)) {
		fail("cmd %q, the Dockerfile says %q", c.Cmd, df.Cmd)
	}
	if df.Workdir != "" && c.WorkingDir != df.Workdir {
		fail("working directory %q, the Dockerfile says %q", c.WorkingDir, df.Workdir)
	}
	env := map[string]string{}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range df.Env {
		if env[k] != v {
			fail("env %s=%q, the Dockerfile says %q", k, env[k], v)
		}
	}
	for _, dst := range df.Copies {
		h := fs.Headers[path.Clean("/"+dst)]
		if h == nil || h.Typeflag != tar.TypeReg {
			fail("%s (a COPY destination) is not a file in the image", dst)
		} else if h.Mode&0o111 == 0 && len(c.Entrypoint) > 0 && c.Entrypoint[0] == dst {
			fail("%s is the entrypoint but not executable", dst)
		}
	}
	ca := env["SSL_CERT_FILE"]
	if ca == "" {
		fail("no SSL_CERT_FILE in the environment")
	} else if !bytes.Contains(fs.Data[ca], []byte("-----BEGIN CERTIFICATE-----")) {
		fail("SSL_CERT_FILE %s holds no certificate", ca)
	}
	uid, gid, _ := strings.Cut(c.User, ":")
	if _, err := strconv.Atoi(uid); err != nil || !hasID(fs.Data["/etc/passwd"], uid, 2) {
		fail("user %s is not a numeric uid listed in /etc/passwd", uid)
	}
	if gid != "" && !hasID(fs.Data["/etc/group"], gid, 2) {
		fail("group %s is not in /etc/group", gid)
	}
	if h := fs.Headers["/tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o1777 != 0o1777 {
		fail("/tmp is not a world-writable sticky directory")
	}
	if c.WorkingDir != "" {
		if h := fs.Headers[path.Clean(c.WorkingDir)]; h == nil || h.Typeflag != tar.TypeDir {
			fail("working directory %s does not exist", c.WorkingDir)
		} else if uid != "" && strconv.Itoa(h.Uid) != uid && h.Mode&0o002 == 0 {
			fail("working directory %s is not writable by uid %s", c.WorkingDir, uid)
		}
	}
	if len(c.Entrypoint) > 0 {
		bad = append(bad, checkELF(fs, c.Entrypoint[0])...)
	}
	return bad, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// hasID reports whether a passwd/group file has a line whose field idx is id.
func hasID(file []byte, id string, idx int) bool {
	for _, l := range strings.Split(string(file), "\n") {
		f := strings.Split(l, ":")
		if len(f) > idx && f[idx] == id {
			return true
		}
	}
	return false
}

// checkELF checks that the image holds the binary's interpreter and every DT_NEEDED library
// where the loader looks for it.
func checkELF(fs *Files, bin string) []string {
	data, ok := fs.Data[bin]
	if !ok {
		return []string{fmt.Sprintf("entrypoint %s is not in the image", bin)}
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil // not ELF (a script): nothing to check
	}
	var bad []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			interp := strings.TrimRight(string(b), "\x00")
			if !fs.exists(interp) {
				bad = append(bad, fmt.Sprintf("ELF interpreter %s of %s is not in the image", interp, bin))
			}
		}
	}
	libs, _ := f.ImportedLibraries()
	for _, lib := range libs {
		found := false
		for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/lib"} {
			found = found || fs.exists(dir+"/"+lib)
		}
		if !found {
			bad = append(bad, fmt.Sprintf("%s needs %s, which is not in the image", bin, lib))
		}
	}
	return bad
}

// Files is an image's flattened filesystem: every header, and the contents of regular files
// (paths are absolute).
type Files struct {
	Headers map[string]*tar.Header
	Data    map[string][]byte
}

func (fs *Files) exists(p string) bool {
	for hops := 0; hops < 10; hops++ {
		h := fs.Headers[path.Clean(p)]
		if h == nil {
			return false
		}
		if h.Typeflag != tar.TypeSymlink {
			return true
		}
		if path.IsAbs(h.Linkname) {
			p = h.Linkname
		} else {
			p = path.Join(path.Dir(p), h.Linkname)
		}
	}
	return false
}

// ReadFiles flattens img's layers (whiteouts applied).
func ReadFiles(img v1.Image) (*Files, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	fs := &Files{Headers: map[string]*tar.Header{}, Data: map[string][]byte{}}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fs, nil
		}
		if err != nil {
			return nil, err
		}
		p := path.Clean("/" + h.Name)
		fs.Headers[p] = h
		if h.Typeflag == tar.TypeReg {
			if fs.Data[p], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
}
