package kubelet

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
)

// HostImage is the table value that runs a container's command from the host's PATH instead of
// mapping the image to one binary (for throw-away pods such as `busybox sh -c ...`).
const HostImage = "host"

// imageTable maps container images to local binaries. Keys are exact image names or path.Match
// patterns ("ghcr.io/kaas/kaas:*"); an exact key wins, then the longest matching pattern.
type imageTable map[string]string

func loadImageTable(file string) (imageTable, error) {
	t := imageTable{}
	if file == "" {
		return t, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("image table %s: %w", file, err)
	}
	return t, nil
}

// resolve returns the binary for image, or HostImage.
func (t imageTable) resolve(image string) (string, error) {
	if bin, ok := t[image]; ok {
		return bin, nil
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return len(keys[i]) > len(keys[j]) || (len(keys[i]) == len(keys[j]) && keys[i] < keys[j])
	})
	for _, k := range keys {
		if ok, _ := path.Match(k, image); ok {
			return t[k], nil
		}
	}
	return "", fmt.Errorf("image %q is not in the harness image table", image)
}

// argv builds the process argv the way a container runtime combines the image's entrypoint with
// the pod's command and args: the image binary stands in for the entrypoint, and when the pod
// sets `command`, its first word (a path inside the image) is replaced by the binary.
func argv(bin string, command, args []string) []string {
	if bin == HostImage {
		return append(append([]string{}, command...), args...)
	}
	out := []string{bin}
	if len(command) > 0 {
		out = append(out, command[1:]...)
	}
	return append(out, args...)
}
