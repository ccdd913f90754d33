package selftest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"kaas/e2e/harness"
)

const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.kaas.dev}
spec:
  group: e2e.kaas.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
          status:
            type: object
            properties:
              phase: {type: string}
`

// TestCustomResource applies a CRD, creates a custom resource, watches it and patches its spec
// and its status subresource, checking the status-subresource rules an operator relies on.
func TestCustomResource(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := context.Background()
	c.Apply(widgetCRD)
	c.MustKubectl("wait", "--for=condition=Established", "crd/widgets.e2e.kaas.dev", "--timeout=60s")

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "e2e.kaas.dev", Version: "v1", Resource: "widgets"}).Namespace("default")
	w, err := widgets.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	c.Apply("apiVersion: e2e.kaas.dev/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {size: 1}\n")
	// Schema validation is real: size must be >= 1.
	if _, err := c.KubectlStdin("apiVersion: e2e.kaas.dev/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {size: 0}\n", "apply", "-f", "-"); err == nil {
		t.Errorf("a widget with size 0 was accepted")
	}
	c.MustKubectl("patch", "widget", "w1", "--type=merge", "-p", `{"spec":{"size":3}}`)
	c.MustKubectl("patch", "widget", "w1", "--type=merge", "--subresource=status", "-p", `{"status":{"phase":"Ready"}}`)
	// Status written through the main resource is ignored when the status subresource exists.
	c.MustKubectl("patch", "widget", "w1", "--type=merge", "-p", `{"status":{"phase":"Hacked"}}`)

	var events []string
	deadline := time.After(30 * time.Second)
	for len(events) < 3 {
		select {
		case ev := <-w.ResultChan():
			u := ev.Object.(*unstructured.Unstructured)
			size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			events = append(events, string(ev.Type)+" size="+strconv.FormatInt(size, 10)+" phase="+phase)
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", ev.Object)
			}
		case <-deadline:
			t.Fatalf("watch saw only %v", events)
		}
	}
	want := []string{"ADDED size=1 phase=", "MODIFIED size=3 phase=", "MODIFIED size=3 phase=Ready"}
	if strings.Join(events, ";") != strings.Join(want, ";") {
		t.Errorf("watch events %v, want %v", events, want)
	}
	got, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Ready" {
		t.Errorf("status.phase = %q, want Ready (the main resource must not write status)", phase)
	}
	// Only spec changes bump the generation: create (1) and the size patch (2).
	if got.GetGeneration() != 2 {
		t.Errorf("generation %d, want 2", got.GetGeneration())
	}
}
