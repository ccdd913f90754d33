package selftest

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"

	"kaas/e2e/harness"
)

// TestLeaseServerSideApply acquires and renews a Lease the way a leader-election loop that
// writes by server-side apply does, and checks that a second field manager cannot take it over
// without forcing (the conflict is what makes such a loop safe).
func TestLeaseServerSideApply(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := context.Background()
	leases := c.Client.CoordinationV1().Leases("default")

	apply := func(manager, holder string, transitions int32, renew time.Time, force bool) error {
		now := metav1.NewMicroTime(renew)
		lease := coordinationv1ac.Lease("controller", "default").WithSpec(coordinationv1ac.LeaseSpec().
			WithHolderIdentity(holder).
			WithLeaseDurationSeconds(15).
			WithLeaseTransitions(transitions).
			WithRenewTime(now))
		_, err := leases.Apply(ctx, lease, metav1.ApplyOptions{FieldManager: manager, Force: force})
		return err
	}

	t0 := time.Now().Truncate(time.Microsecond)
	if err := apply("holder-a", "a", 0, t0, false); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	first, err := leases.Get(ctx, "controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := apply("holder-a", "a", 0, t0.Add(2*time.Second), false); err != nil {
		t.Fatalf("renew: %v", err)
	}
	renewed, err := leases.Get(ctx, "controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.Spec.RenewTime.After(first.Spec.RenewTime.Time) || renewed.ResourceVersion == first.ResourceVersion {
		t.Errorf("renew did not move renewTime/resourceVersion: %v/%s -> %v/%s",
			first.Spec.RenewTime, first.ResourceVersion, renewed.Spec.RenewTime, renewed.ResourceVersion)
	}

	// Another manager setting the holder conflicts with holder-a's ownership of the field.
	err = apply("holder-b", "b", 1, t0.Add(3*time.Second), false)
	if !apierrors.IsConflict(err) {
		t.Fatalf("takeover without force: got %v, want a conflict", err)
	}
	// Forcing takes the fields over (what a loop does once the lease has expired).
	if err := apply("holder-b", "b", 1, t0.Add(20*time.Second), true); err != nil {
		t.Fatalf("forced takeover: %v", err)
	}
	taken, err := leases.Get(ctx, "controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *taken.Spec.HolderIdentity != "b" || *taken.Spec.LeaseTransitions != 1 {
		t.Errorf("after takeover: holder %q transitions %d", *taken.Spec.HolderIdentity, *taken.Spec.LeaseTransitions)
	}
	owners := map[string]bool{}
	for _, mf := range taken.ManagedFields {
		owners[mf.Manager] = true
	}
	if !owners["holder-b"] {
		t.Errorf("managedFields %v lack holder-b", owners)
	}

	// The same through kubectl, as a person debugging would do it.
	out := c.MustKubectl("get", "lease", "controller", "-n", "default", "-o", "jsonpath={.spec.holderIdentity}")
	if strings.TrimSpace(out) != "b" {
		t.Errorf("kubectl sees holder %q", out)
	}
}
