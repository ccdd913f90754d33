package scenarios

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

// TestKafkaUser: a KafkaCluster (one broker) whose SCRAM listener takes its users from KafkaUser resources
// only (no users Secret, no super user), as Strimzi users write them. The operator generates
// alice's password into a Secret named after her and takes bob's from a Secret of the user's;
// franz-go logs in as both with SCRAM-SHA-512. Alice produces to and consumes `orders` in a
// group her prefixed ACL allows; bob, without ACLs, is refused the topic; alice's produce
// quota is hers alone to change through her KafkaUser. Deleting alice's KafkaUser locks her out.
func TestKafkaUser(t *testing.T) {
	c := startWithOperator(t)
	// One broker: that every broker of a cluster enforces the users is tested in-process
	// (broker/kaas/tests/cluster_security.rs).
	cluster := strings.Replace(kaastest.Cluster(`  listener:
    authentication: {type: scram-sha-512}
  authorization: {type: simple}
`), "replicas: 3", "replicas: 1", 1)
	c.Apply(cluster + "---\n" + kaastest.Topic("orders", 2, "") + fmt.Sprintf(`---
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

	seed := fmt.Sprintf("kc-0.kc-brokers.%s.svc:9092", ns)
	loginAs := func(user, password string, extra ...kgo.Opt) []kgo.Opt {
		return append([]kgo.Opt{kgo.SeedBrokers(seed), kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism())}, extra...)
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

// TestKafkaUserTLS: a listener that asks for client certificates (`authentication: tls`) with
// certificates the operator issues (`tls: {}`): a KafkaUser of type tls gets a certificate for
// `CN=<name>` from the cluster's clients CA in its Secret; franz-go presents it, trusts the
// cluster CA, and produces and consumes what the user's ACLs allow. A user without ACLs is
// refused the topic, and a client without a certificate is refused altogether.
func TestKafkaUserTLS(t *testing.T) {
	c := startWithOperator(t)
	cluster := strings.Replace(kaastest.Cluster(`  listener:
    tls: {}
    authentication: {type: tls}
  authorization: {type: simple}
`), "replicas: 3", "replicas: 1", 1)
	user := func(name, acls string) string {
		return fmt.Sprintf("---\napiVersion: kaas.dev/v1alpha1\nkind: KafkaUser\nmetadata: {name: %s, namespace: %s}\n"+
			"spec:\n  clusterRef: kc\n  authentication: {type: tls}\n%s", name, ns, acls)
	}
	c.Apply(cluster + "---\n" + kaastest.Topic("events", 1, "") + user("alice", `  authorization:
    type: simple
    acls:
      - resource: {type: topic, name: events}
        operations: [Read, Write, Describe]
      - resource: {type: group, name: readers}
        operations: [Read]
`) + user("carol", ""))
	c.WaitJSONPath(4*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
	for _, name := range []string{"alice", "carol"} {
		c.WaitJSONPath(2*time.Minute, ns, "kafkauser", name, `.status.conditions[?(@.type=="Ready")].status`, "True")
		if got := c.JSONPath(ns, "kafkauser", name, ".status.username"); got != "CN="+name {
			t.Fatalf("%s's username is %q", name, got)
		}
	}
	roots := x509.NewCertPool()
	if caPEM := secretData(t, c, "kc-cluster-ca-cert", "ca.crt"); !roots.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatalf("kc-cluster-ca-cert holds no certificate: %q", caPEM)
	}
	certificate := func(name string) tls.Certificate {
		pair, err := tls.X509KeyPair([]byte(secretData(t, c, name, "user.crt")), []byte(secretData(t, c, name, "user.key")))
		if err != nil {
			t.Fatalf("%s's Secret: %v", name, err)
		}
		return pair
	}
	seed := fmt.Sprintf("kc-0.kc-brokers.%s.svc:9092", ns)
	as := func(certs []tls.Certificate, extra ...kgo.Opt) []kgo.Opt {
		config := &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}
		return append([]kgo.Opt{kgo.SeedBrokers(seed), kgo.DialTLSConfig(config)}, extra...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("alice's certificate produces and consumes", func(t *testing.T) {
		cl, err := kgo.NewClient(as([]tls.Certificate{certificate("alice")}, kgo.DefaultProduceTopic("events"),
			kgo.ConsumeTopics("events"), kgo.ConsumerGroup("readers"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		c.Eventually(time.Minute, "alice produces to events", func() (bool, error) {
			err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("from-alice")}).FirstErr()
			return err == nil, err
		})
		var got []string
		for len(got) == 0 && ctx.Err() == nil {
			fetches := cl.PollFetches(ctx)
			if errs := fetches.Errors(); len(errs) > 0 {
				t.Fatalf("alice consuming in readers: %v", errs)
			}
			fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		if len(got) != 1 || got[0] != "from-alice" {
			t.Fatalf("read %q", got)
		}
	})

	t.Run("carol may not touch events and no certificate gets nowhere", func(t *testing.T) {
		carol, err := kgo.NewClient(as([]tls.Certificate{certificate("carol")})...)
		if err != nil {
			t.Fatal(err)
		}
		defer carol.Close()
		if _, err := kadm.NewClient(carol).ListBrokers(ctx); err != nil {
			t.Fatalf("carol's certificate is refused: %v", err)
		}
		if md, err := kadm.NewClient(carol).Metadata(ctx, "events"); err == nil && md.Topics["events"].Err == nil {
			t.Fatal("carol described events without an ACL")
		}
		if listsBrokers(ctx, t, as(nil)) {
			t.Fatal("a client without a certificate listed the cluster")
		}
	})

	// Both CAs renewed (forced, as a user would ask for it): the operator issues the listener
	// certificate and alice's again, the kubelet updates the brokers' mounted files and the
	// brokers serve the new ones without a restart. The CAs keep their keys, so a client that
	// still trusts the old ca.crt and presents alice's old certificate keeps working, and one
	// with the new ca.crt and certificate works too.
	t.Run("renewed CAs keep old and new clients working without a restart", func(t *testing.T) {
		podsBefore, generationBefore := kaastest.BrokerPods(c)
		oldAlice := certificate("alice")
		oldListener := secretData(t, c, "kc-listener-tls", "tls.crt")
		oldUser := secretData(t, c, "alice", "user.crt")
		before, err := kgo.NewClient(as([]tls.Certificate{oldAlice}, kgo.DefaultProduceTopic("events"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer before.Close()
		produce := func(cl *kgo.Client, value string) {
			t.Helper()
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatalf("producing %q: %v", value, err)
			}
		}
		produce(before, "before-renewal")

		for _, ca := range []string{"kc-cluster-ca", "kc-clients-ca"} {
			c.MustKubectl("-n", ns, "annotate", "secret", ca, "kaas.dev/force-renew=true")
		}
		// At the operator's next reconcile (a minute at most), and the agent's of alice.
		for _, ca := range []string{"kc-cluster-ca", "kc-clients-ca"} {
			c.WaitJSONPath(3*time.Minute, ns, "secret", ca, `.metadata.annotations.kaas\.dev/force-renew`, "")
		}
		c.Eventually(3*time.Minute, "the listener and alice's certificates issued again", func() (bool, error) {
			listener, user := secretData(t, c, "kc-listener-tls", "tls.crt"), secretData(t, c, "alice", "user.crt")
			return listener != oldListener && user != oldUser, fmt.Errorf("listener renewed %v, alice's %v", listener != oldListener, user != oldUser)
		})
		newListener := pemDER(t, secretData(t, c, "kc-listener-tls", "tls.crt"))
		c.Eventually(2*time.Minute, "the broker serves the renewed listener certificate", func() (bool, error) {
			var served []byte
			config := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{oldAlice}, MinVersion: tls.VersionTLS12,
				VerifyConnection: func(cs tls.ConnectionState) error { served = cs.PeerCertificates[0].Raw; return nil }}
			conn, err := tls.Dial("tcp", seed, config)
			if err != nil {
				return false, err
			}
			_ = conn.Close()
			return string(served) == string(newListener), fmt.Errorf("still the old certificate")
		})

		produce(before, "connected-before")
		oldClient, err := kgo.NewClient(as([]tls.Certificate{oldAlice}, kgo.DefaultProduceTopic("events"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer oldClient.Close()
		produce(oldClient, "old-trust-old-certificate")

		newRoots := x509.NewCertPool()
		if !newRoots.AppendCertsFromPEM([]byte(secretData(t, c, "kc-cluster-ca-cert", "ca.crt"))) {
			t.Fatal("kc-cluster-ca-cert holds no certificate")
		}
		config := &tls.Config{RootCAs: newRoots, Certificates: []tls.Certificate{certificate("alice")}, MinVersion: tls.VersionTLS12}
		renewed, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.DialTLSConfig(config), kgo.DefaultProduceTopic("events"),
			kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer renewed.Close()
		produce(renewed, "new-trust-new-certificate")
		want := map[string]bool{"before-renewal": false, "connected-before": false, "old-trust-old-certificate": false, "new-trust-new-certificate": false}
		for missing := len(want); missing > 0 && ctx.Err() == nil; {
			fetches := renewed.PollFetches(ctx)
			if errs := fetches.Errors(); len(errs) > 0 {
				t.Fatalf("reading events with the renewed certificate: %v", errs)
			}
			fetches.EachRecord(func(r *kgo.Record) {
				if seen, ok := want[string(r.Value)]; ok && !seen {
					want[string(r.Value)] = true
					missing--
				}
			})
		}
		for value, seen := range want {
			if !seen {
				t.Errorf("%q not read back", value)
			}
		}
		if pods, generation := kaastest.BrokerPods(c); pods != podsBefore || generation != generationBefore {
			t.Errorf("a renewal restarted brokers: pods %q -> %q, StatefulSet generation %s -> %s", podsBefore, pods, generationBefore, generation)
		}
	})
}

// pemDER is the DER of the first certificate of a PEM text.
func pemDER(t *testing.T, text string) []byte {
	t.Helper()
	block, _ := pem.Decode([]byte(text))
	if block == nil {
		t.Fatalf("no PEM block in %q", text)
	}
	return block.Bytes
}

// startWithOperator starts a control plane (one node) with the operator installed from
// config/default and its CRDs established; the operator and the brokers run from their images
// (pulled from the harness registry), on the one volume, which their user may write.
func startWithOperator(t *testing.T) *harness.Cluster {
	t.Helper()
	c := harness.Start(t, kaastest.Pulled(t, harness.Options{}))
	kaastest.WritableByImages(t, c.VolumeDir("shared"))
	c.MustKubectl("apply", "-k", filepath.Join(repoRoot(t), "config", "default"))
	for _, crd := range []string{"kafkaclusters", "kafkatopics", "kafkausers", "kafkaclusterassignments"} {
		c.MustKubectl("wait", "--for=condition=Established", "crd/"+crd+".kaas.dev", "--timeout=60s")
	}
	return c
}
