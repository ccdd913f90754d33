package selftest

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kaas/e2e/harness"
)

const readerRBAC = `
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: configmap-reader, namespace: default}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: default}
subjects: [{kind: ServiceAccount, name: reader, namespace: default}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmap-reader}
`

// TestRBAC checks that RBAC is enforced: a ServiceAccount may do what its Role grants and is
// denied a verb the Role lacks, both by `kubectl auth can-i --as` and with its real token.
func TestRBAC(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := context.Background()
	c.Apply(readerRBAC)
	const sa = "system:serviceaccount:default:reader"

	canI := func(verb string) string {
		out, _ := c.Kubectl("auth", "can-i", verb, "configmaps", "-n", "default", "--as", sa)
		return strings.TrimSpace(out)
	}
	if got := canI("list"); got != "yes" {
		t.Errorf("can-i list = %q, want yes", got)
	}
	if got := canI("create"); got != "no" {
		t.Errorf("can-i create = %q, want no", got)
	}

	token := strings.TrimSpace(c.MustKubectl("create", "token", "reader", "-n", "default"))
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list configmaps with the reader's token: %v", err)
	}
	_, err = client.CoreV1().ConfigMaps("default").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nope"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("create configmap with the reader's token: got %v, want Forbidden", err)
	}
	if _, err := client.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets with the reader's token: got %v, want Forbidden", err)
	}
}
