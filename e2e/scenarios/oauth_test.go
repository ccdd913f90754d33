package scenarios

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

// TestOAuthListener: a KafkaCluster whose listener authenticates clients with SASL/OAUTHBEARER
// as Strimzi users write it (`type: oauth`, the issuer and audience checked), with the
// identity provider's key set in a Secret, over TLS with a certificate the operator issues
// (`tls: {}`). franz-go trusts the operator's cluster CA, logs in with a token the provider's
// key signed and produces and consumes; a token signed by another key, one for another audience
// and one from another issuer are refused. A listener Secret deleted by mistake is issued again
// by the same CA.
func TestOAuthListener(t *testing.T) {
	c := startWithOperator(t)

	const issuer = "https://idp.kaas-e2e.example"
	provider := newSigner(t, "provider-key")
	cluster := strings.Replace(kaastest.Cluster(`  listener:
    tls: {}
    authentication:
      type: oauth
      jwksSecret: {secretName: kc-jwks, key: jwks.json}
      validIssuerUri: `+issuer+`
      checkAudience: true
      clientId: kafka
`), "replicas: 3", "replicas: 1", 1)
	c.Apply(cluster + "---\n" + secret("kc-jwks", map[string]string{"jwks.json": provider.jwks(t)}) +
		"---\n" + kaastest.Topic("events", 1, ""))
	c.WaitJSONPath(4*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
	if got := c.JSONPath(ns, "statefulset", "kc", `.spec.template.spec.containers[0].env[?(@.name=="KAAS_SASL_ENABLED_MECHANISMS")].value`); got != "OAUTHBEARER" {
		t.Fatalf("KAAS_SASL_ENABLED_MECHANISMS = %q", got)
	}

	if got := c.JSONPath(ns, "statefulset", "kc", `.spec.template.spec.volumes[?(@.name=="listener-tls")].secret.secretName`); got != "kc-listener-tls" {
		t.Fatalf("the brokers mount %q, not the operator's certificate", got)
	}
	caPEM := secretData(t, c, "kc-cluster-ca-cert", "ca.crt")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatalf("kc-cluster-ca-cert holds no certificate: %q", caPEM)
	}
	seed := fmt.Sprintf("kc-0.kc-brokers.%s.svc:9092", ns)
	withToken := func(token string, extra ...kgo.Opt) []kgo.Opt {
		return append([]kgo.Opt{
			kgo.SeedBrokers(seed),
			kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
			kgo.SASL(oauth.Auth{Token: token}.AsMechanism()),
		}, extra...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("a token the provider signed for kafka produces and consumes", func(t *testing.T) {
		token := provider.token(t, map[string]any{"sub": "alice", "iss": issuer, "aud": "kafka"})
		cl, err := kgo.NewClient(withToken(token, kgo.DefaultProduceTopic("events"), kgo.ConsumeTopics("events"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("signed-in")}).FirstErr(); err != nil {
			t.Fatalf("producing with a valid token: %v", err)
		}
		var got []string
		for len(got) == 0 && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		if len(got) != 1 || got[0] != "signed-in" {
			t.Fatalf("read %q", got)
		}
	})

	t.Run("a deleted listener Secret is issued again by the same CA", func(t *testing.T) {
		before := secretData(t, c, "kc-listener-tls", "tls.crt")
		c.MustKubectl("-n", ns, "delete", "secret", "kc-listener-tls")
		c.Eventually(time.Minute, "the listener Secret issued again", func() (bool, error) {
			out, err := c.Kubectl("-n", ns, "get", "secret", "kc-listener-tls", "-o", `jsonpath={.data.tls\.crt}`)
			return err == nil && out != "", fmt.Errorf("%v: %s", err, out)
		})
		leaf := secretData(t, c, "kc-listener-tls", "tls.crt")
		if leaf == before {
			t.Fatalf("the same certificate came back")
		}
		block, _ := pem.Decode([]byte(leaf))
		if block == nil {
			t.Fatalf("tls.crt is no PEM: %q", leaf)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kc-bootstrap." + ns + ".svc"}); err != nil {
			t.Fatalf("the new certificate does not chain to the cluster CA clients trust: %v", err)
		}
	})

	t.Run("tokens the listener must not accept are refused", func(t *testing.T) {
		impostor := newSigner(t, "provider-key") // the same key id, another key
		for what, token := range map[string]string{
			"signed by another key": impostor.token(t, map[string]any{"sub": "alice", "iss": issuer, "aud": "kafka"}),
			"for another audience":  provider.token(t, map[string]any{"sub": "alice", "iss": issuer, "aud": "billing"}),
			"from another issuer":   provider.token(t, map[string]any{"sub": "alice", "iss": "https://elsewhere.example", "aud": "kafka"}),
		} {
			if listsBrokers(ctx, t, withToken(token)) {
				t.Errorf("a token %s listed the cluster", what)
			}
		}
	})
}

// secretData is one key of a Secret in the test namespace, decoded.
func secretData(t *testing.T, c *harness.Cluster, name, key string) string {
	t.Helper()
	out, err := c.Kubectl("-n", ns, "get", "secret", name, "-o", "jsonpath={.data."+strings.ReplaceAll(key, ".", `\.`)+"}")
	if err != nil {
		t.Fatalf("secret %s: %v: %s", name, err, out)
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("secret %s key %s: %v", name, key, err)
	}
	return string(b)
}

// signer is an identity provider's signing key (ES256).
type signer struct {
	kid string
	key *ecdsa.PrivateKey
}

func newSigner(t *testing.T, kid string) *signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &signer{kid: kid, key: key}
}

var b64 = base64.RawURLEncoding

// jwks is the key set that publishes the public key (RFC 7517).
func (s *signer) jwks(t *testing.T) string {
	t.Helper()
	coordinate := func(v []byte) string { return b64.EncodeToString(append(make([]byte, 32-len(v)), v...)) }
	set := map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": s.kid, "alg": "ES256", "use": "sig",
		"x": coordinate(s.key.PublicKey.X.Bytes()), "y": coordinate(s.key.PublicKey.Y.Bytes()),
	}}}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// token is a JWT of claims (valid for an hour from now) signed with ES256 (RFC 7518 §3.4: the
// signature is r and s, 32 bytes each).
func (s *signer) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	now := time.Now().Unix()
	claims["iat"], claims["exp"] = now, now+3600
	header, err := json.Marshal(map[string]string{"alg": "ES256", "typ": "JWT", "kid": s.kid})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	signed := b64.EncodeToString(header) + "." + b64.EncodeToString(body)
	digest := sha256.Sum256([]byte(signed))
	r, sig, err := ecdsa.Sign(rand.Reader, s.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	raw := append(append(make([]byte, 32-len(r.Bytes())), r.Bytes()...), append(make([]byte, 32-len(sig.Bytes())), sig.Bytes()...)...)
	return signed + "." + b64.EncodeToString(raw)
}
