package scenarios

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

// TestSecuredListener: a KafkaCluster whose listener takes TLS from one Secret and SCRAM-SHA-512
// users from another, with ACLs on, as a user would write it. franz-go logs in over TLS, is
// refused with a wrong password and without TLS; alice may describe nothing until the admin
// (a super user) allows her, then every broker lets her; she runs a transaction across partitions led by different
// brokers — whose markers and verifications the brokers send each other on their inter-broker
// listeners (pod IP, port 9091), which the client listener's TLS and SASL do not apply to.
func TestSecuredListener(t *testing.T) {
	kaasBin := harness.CargoBinary(t, "KAAS_BIN", "kaas")
	c := startWithOperator(t)

	ca, caPEM := newCA(t)
	certPEM, keyPEM := ca.leaf(t, "*.kc-brokers."+ns+".svc", "kc-bootstrap."+ns+".svc")
	users := scramUsers(t, kaasBin, map[string]string{"alice": "alice-secret", "admin": "admin-secret"})
	c.Apply(kaastest.Cluster(`  listener:
    tls: {secretName: kc-tls}
    authentication: {type: scram-sha-512, secretName: kc-users}
  authorization: {type: simple, superUsers: [admin]}
`) + "---\n" + secret("kc-tls", map[string]string{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM}) +
		"---\n" + secret("kc-users", map[string]string{"users.json": users}) +
		"---\n" + kaastest.Topic("orders", 3, ""))
	c.WaitJSONPath(4*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
	c.WaitJSONPath(2*time.Minute, ns, "kafkacluster", "kc", ".status.readyBrokers", "3")
	if got := c.JSONPath(ns, "statefulset", "kc", `.spec.template.spec.containers[0].env[?(@.name=="KAAS_SECURITY_PROTOCOL")].value`); got != "SASL_SSL" {
		t.Fatalf("KAAS_SECURITY_PROTOCOL = %q", got)
	}

	seeds := (&seedsEnv{}).seeds()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(caPEM))
	tlsConfig := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	loginAs := func(user, password string, extra ...kgo.Opt) []kgo.Opt {
		return append([]kgo.Opt{
			kgo.SeedBrokers(seeds...),
			kgo.DialTLSConfig(tlsConfig),
			kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
		}, extra...)
	}
	login := func(password string, extra ...kgo.Opt) []kgo.Opt { return loginAs("alice", password, extra...) }
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	t.Run("refused without the password or without TLS", func(t *testing.T) {
		for what, opts := range map[string][]kgo.Opt{
			"a wrong password": login("guess"),
			"no TLS":           {kgo.SeedBrokers(seeds...), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())},
			"no SASL":          {kgo.SeedBrokers(seeds...), kgo.DialTLSConfig(tlsConfig)},
		} {
			if listsBrokers(ctx, t, opts) {
				t.Errorf("%s: the cluster was listed", what)
			}
		}
	})

	t.Run("ACLs: alice may do what the admin allows her, on every broker", func(t *testing.T) {
		alice, err := kgo.NewClient(login("alice-secret")...)
		if err != nil {
			t.Fatal(err)
		}
		defer alice.Close()
		// kadm reports TOPIC_AUTHORIZATION_FAILED as the call's error.
		if md, err := kadm.NewClient(alice).Metadata(ctx, "orders"); err == nil && md.Topics["orders"].Err == nil {
			t.Fatalf("alice described orders before any ACL named her")
		}
		admin, err := kgo.NewClient(loginAs("admin", "admin-secret")...)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		acls := kadm.NewACLs().Allow("User:alice").AllowHosts("*").Topics("orders").TransactionalIDs("secured").
			Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral)
		// CreateACLs is forwarded to the controller; a broker that does not know it yet (just
		// started, or the role changing hands) answers NOT_CONTROLLER, which is retriable, and
		// kadm does not retry a per-resource error itself.
		c.Eventually(30*time.Second, "the admin creates alice's ACLs", func() (bool, error) {
			created, err := kadm.NewClient(admin).CreateACLs(ctx, acls)
			if err != nil {
				return false, err
			}
			for _, r := range created {
				if errors.Is(r.Err, kerr.NotController) {
					return false, fmt.Errorf("creating %s %s: %v (%s)", r.Type, r.Name, r.Err, r.ErrMessage)
				}
				if r.Err != nil {
					t.Fatalf("creating %s %s: %v (%s)", r.Type, r.Name, r.Err, r.ErrMessage)
				}
			}
			return true, nil
		})
		// Every broker enforces it once it has read the controller's file (the controller tells
		// them at once after the change; each also reads it every second): ask each broker the
		// cluster lists itself (a client's own Metadata goes to whichever broker it likes, and
		// the seed is one bootstrap address). Both ACLs are in the one file, so a broker that
		// lets alice describe orders lets her write as "secured" too.
		var ids []int32
		c.Eventually(30*time.Second, "the cluster lists its three brokers", func() (bool, error) {
			// Not kadm's BrokerMetadata: it answers from the client's metadata cache.
			resp, err := admin.Request(ctx, kmsg.NewPtrMetadataRequest())
			if err != nil {
				return false, err
			}
			ids = ids[:0]
			for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
				ids = append(ids, b.NodeID)
			}
			return len(ids) == 3, fmt.Errorf("brokers %v", ids)
		})
		for _, i := range ids {
			c.Eventually(30*time.Second, fmt.Sprintf("broker %d lets alice describe orders", i), func() (bool, error) {
				req := kmsg.NewPtrMetadataRequest()
				topic := kmsg.NewMetadataRequestTopic()
				topic.Topic = kmsg.StringPtr("orders")
				req.Topics = append(req.Topics, topic)
				resp, err := alice.Broker(int(i)).Request(ctx, req)
				if err != nil {
					return false, err
				}
				topics := resp.(*kmsg.MetadataResponse).Topics
				return len(topics) == 1 && topics[0].ErrorCode == 0, fmt.Errorf("%+v", topics)
			})
		}
	})

	t.Run("a transaction across brokers over SASL_SSL", func(t *testing.T) {
		admin, err := kgo.NewClient(login("alice-secret")...)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		leaders := map[int32]bool{}
		c.Eventually(time.Minute, "orders led by three brokers", func() (bool, error) {
			md, err := kadm.NewClient(admin).Metadata(ctx, "orders")
			if err != nil {
				return false, err
			}
			clear(leaders)
			for _, p := range md.Topics["orders"].Partitions {
				if p.Err == nil && p.Leader >= 0 {
					leaders[p.Leader] = true
				}
			}
			return len(md.Brokers) == 3 && len(md.Topics["orders"].Partitions) == 3 && len(leaders) >= 2,
				fmt.Errorf("%d brokers, leaders %v", len(md.Brokers), leaders)
		})

		// Every broker serves alice's ACLs already (the subtest above waited for each).
		cl, err := kgo.NewClient(login("alice-secret", kgo.TransactionalID("secured"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.DefaultProduceTopic("orders"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var want []string
		for round, commit := range []bool{true, false, true} {
			if round > 0 {
				if err := cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
			}
			for p := range int32(3) {
				v := fmt.Sprintf("round-%d-%d", round, p)
				if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatalf("producing %s: %v", v, err)
				}
				if commit {
					want = append(want, v)
				}
			}
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatalf("ending transaction %d (commit %v): %v", round, commit, err)
			}
		}

		rd, err := kgo.NewClient(login("alice-secret", kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeTopics("orders"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		seen := map[string]int{}
		for len(seen) < len(want) && ctx.Err() == nil {
			rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		}
		// Anything aborted would follow the committed records: give it the chance to arrive.
		short, stop := context.WithTimeout(ctx, 3*time.Second)
		rd.PollFetches(short).EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		stop()
		for _, v := range want {
			if seen[v] != 1 {
				t.Errorf("%s read %d times", v, seen[v])
			}
		}
		if len(seen) != len(want) {
			t.Errorf("read %d distinct records, committed %d: %v", len(seen), len(want), seen)
		}
	})
}

// listsBrokers says whether a client made with opts gets the cluster's brokers listed (one try,
// within 20 s): false when the listener refuses it.
func listsBrokers(ctx context.Context, t *testing.T, opts []kgo.Opt) bool {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0), kgo.RequestTimeoutOverhead(5*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	short, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	_, err = kadm.NewClient(cl).ListBrokers(short)
	return err == nil
}

// secret is a Secret in the test namespace with the given string data.
func secret(name string, data map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\nstringData:\n", name, ns)
	for k, v := range data {
		fmt.Fprintf(&b, "  %s: |\n", k)
		for _, line := range strings.Split(strings.TrimRight(v, "\n"), "\n") {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	return b.String()
}

// scramUsers writes the users' salted credentials with the broker's own CLI, each password on
// its standard input, and returns the file.
func scramUsers(t *testing.T, kaasBin string, users map[string]string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "users.json")
	for user, password := range users {
		cmd := exec.Command(kaasBin, "scram-credential", "--credentials", file, "--user", user, "--mechanism", "SCRAM-SHA-512")
		cmd.Stdin = strings.NewReader(password + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scram-credential: %v: %s", err, out)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testCA signs the listener's certificate.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T) (*testCA, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kaas-e2e-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// leaf is a server certificate for names, and its key, in PEM.
func (ca *testCA) leaf(t *testing.T, names ...string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
}
