package scenarios

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

// TestKafkaUser: a KafkaCluster whose SCRAM listener takes its users from KafkaUser resources
// only (no users Secret, no super user), as Strimzi users write them. The operator generates
// alice's password into a Secret named after her and takes bob's from a Secret of the user's;
// franz-go logs in as both with SCRAM-SHA-512. Alice produces to and consumes `orders` in a
// group her prefixed ACL allows; bob, without ACLs, is refused the topic; alice's produce
// quota is hers alone to change through her KafkaUser. Deleting alice's KafkaUser locks her out.
func TestKafkaUser(t *testing.T) {
	root := repoRoot(t)
	c := harness.Start(t, harness.Options{Images: map[string]string{
		"ghcr.io/kaas/kaas-operator:*": harness.CargoBinary(t, "KAAS_OPERATOR_BIN", "kaas-operator"),
		"ghcr.io/kaas/kaas:*":          harness.CargoBinary(t, "KAAS_BIN", "kaas"),
	}})
	c.MustKubectl("apply", "-k", filepath.Join(root, "config", "default"))
	for _, crd := range []string{"kafkaclusters", "kafkatopics", "kafkausers", "kafkaclusterassignments"} {
		c.MustKubectl("wait", "--for=condition=Established", "crd/"+crd+".kaas.dev", "--timeout=60s")
	}
	c.Apply(kaastest.Cluster(`  listener:
    authentication: {type: scram-sha-512}
  authorization: {type: simple}
`) + "---\n" + kaastest.Topic("orders", 2, "") + fmt.Sprintf(`---
apiVersion: kaas.dev/v1alpha1
kind: KafkaUser
metadata: {name: alice, namespace: %[1]s}
spec:
  clusterRef: kc
  authentication: {type: scram-sha-512}
  authorization:
    type: simple
    acls:
      - resource: {type: topic, name: orders}
        operations: [Read, Write, Describe, Create]
      - resource: {type: group, name: app-, patternType: prefix}
        operations: [Read]
  quotas: {producerByteRate: 10485760}
---
apiVersion: kaas.dev/v1alpha1
kind: KafkaUser
metadata: {name: bob, namespace: %[1]s}
spec:
  clusterRef: kc
  authentication:
    type: scram-sha-512
    password: {valueFrom: {secretKeyRef: {name: bob-password, key: pw}}}
---
apiVersion: v1
kind: Secret
metadata: {name: bob-password, namespace: %[1]s}
stringData: {pw: bob-chose-this}
`, ns))
	c.WaitJSONPath(4*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
	for _, user := range []string{"alice", "bob"} {
		c.WaitJSONPath(2*time.Minute, ns, "kafkauser", user, `.status.conditions[?(@.type=="Ready")].status`, "True")
		if got := c.JSONPath(ns, "kafkauser", user, ".status.username") + "/" + c.JSONPath(ns, "kafkauser", user, ".status.secret"); got != user+"/"+user {
			t.Fatalf("%s's status names username/secret %q", user, got)
		}
	}
	password := func(user string) string {
		encoded := c.JSONPath(ns, "secret", user, ".data.password")
		decoded, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil || len(decoded) == 0 {
			t.Fatalf("secret %s has no password: %q (%v)", user, encoded, err)
		}
		return string(decoded)
	}
	alicePassword, bobPassword := password("alice"), password("bob")
	if len(alicePassword) < 24 {
		t.Fatalf("alice's generated password is %d characters", len(alicePassword))
	}
	if bobPassword != "bob-chose-this" {
		t.Fatalf("bob's Secret holds %q, not the password his KafkaUser names", bobPassword)
	}

	seeds := (&seedsEnv{}).seeds()
	loginAs := func(user, password string, extra ...kgo.Opt) []kgo.Opt {
		return append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism())}, extra...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	t.Run("alice produces and consumes in her group", func(t *testing.T) {
		producer, err := kgo.NewClient(loginAs("alice", alicePassword, kgo.DefaultProduceTopic("orders"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer producer.Close()
		c.Eventually(time.Minute, "alice produces to orders", func() (bool, error) {
			err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte("from-alice")}).FirstErr()
			return err == nil, err
		})
		consumer, err := kgo.NewClient(loginAs("alice", alicePassword, kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("app-orders"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer consumer.Close()
		got := false
		for !got && ctx.Err() == nil {
			fetches := consumer.PollFetches(ctx)
			if errs := fetches.Errors(); len(errs) > 0 {
				t.Fatalf("alice consuming in app-orders: %v", errs)
			}
			fetches.EachRecord(func(r *kgo.Record) { got = got || string(r.Value) == "from-alice" })
		}
		if !got {
			t.Fatal("alice never read her record back")
		}
	})

	t.Run("bob logs in with his own password and may not touch orders", func(t *testing.T) {
		if listsBrokers(ctx, t, loginAs("bob", "wrong")) {
			t.Fatal("bob logged in with a wrong password")
		}
		bob, err := kgo.NewClient(loginAs("bob", bobPassword)...)
		if err != nil {
			t.Fatal(err)
		}
		defer bob.Close()
		if _, err := kadm.NewClient(bob).ListBrokers(ctx); err != nil {
			t.Fatalf("bob cannot log in: %v", err)
		}
		if md, err := kadm.NewClient(bob).Metadata(ctx, "orders"); err == nil && md.Topics["orders"].Err == nil {
			t.Fatal("bob described orders without an ACL")
		}
	})

	t.Run("deleting alice's KafkaUser locks her out", func(t *testing.T) {
		c.MustKubectl("-n", ns, "delete", "kafkauser", "alice")
		c.Eventually(time.Minute, "alice refused", func() (bool, error) {
			return !listsBrokers(ctx, t, loginAs("alice", alicePassword)), nil
		})
		// Her Secret is the KafkaUser's: garbage-collected with it.
		c.Eventually(time.Minute, "alice's Secret gone", func() (bool, error) {
			_, err := c.Kubectl("-n", ns, "get", "secret", "alice")
			return err != nil, nil
		})
	})
}
