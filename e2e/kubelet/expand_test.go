package kubelet

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "POD_IP": "10.0.0.5"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)":           "1",
		"x-$(A)-y":       "x-1-y",
		"$(POD_IP):9092": "10.0.0.5:9092",
		"$(MISSING)":     "$(MISSING)",
		"$$(A)":          "$(A)",
		"$$":             "$",
		"a$b":            "a$b",
		"$(unterminated": "$(unterminated",
		"trailing$":      "trailing$",
		"$(A)$(A)":       "11",
	} {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageTable(t *testing.T) {
	tab := imageTable{"kaas:*": "/bin/kaas", "kaas:dev": "/bin/kaas-dev", "*": HostImage}
	for img, want := range map[string]string{"kaas:1.0": "/bin/kaas", "kaas:dev": "/bin/kaas-dev", "busybox": HostImage} {
		if got, err := tab.resolve(img); err != nil || got != want {
			t.Errorf("resolve(%q) = %q, %v; want %q", img, got, err, want)
		}
	}
	if _, err := (imageTable{}).resolve("x"); err == nil {
		t.Errorf("resolve in an empty table succeeded")
	}
	got := argv("/bin/kaas", []string{"/kaas", "broker"}, []string{"--x"})
	if want := []string{"/bin/kaas", "broker", "--x"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("argv = %q, want %q", got, want)
	}
}
