package selftest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kaas/e2e/harness"
)

// ingressBackend is a testpod serving HTTPS with its own certificate (the Secret <name>-tls)
// behind a Service port (%[2]s).
const ingressBackend = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: ingress}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: kaas-e2e/testpod:v1
        command: [/testpod]
        args: ["--listen=:8443", "--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key"]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        volumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]
        readinessProbe:
          httpGet: {path: /healthz, port: 8443, scheme: HTTPS}
          periodSeconds: 1
      volumes: [{name: tls, secret: {secretName: %[1]s-tls}}]
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: ingress}
spec:
  selector: {app: %[1]s}
  ports: [%[2]s]
`

// ingressRule is an Ingress of class %[2]s for host %[3]s to a Service port (%[4]s), with
// annotations %[5]s: as the kaas operator writes one per broker for an external listener of
// type ingress.
const ingressRule = `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: %[1]s
  namespace: ingress
  annotations: {%[5]s}
spec:
  ingressClassName: %[2]s
  tls: [{hosts: [%[3]s]}]
  rules:
  - host: %[3]s
    http: {paths: [{path: /, pathType: Prefix, backend: {service: %[4]s}}]}
`

const passthrough = `nginx.ingress.kubernetes.io/ssl-passthrough: "true", nginx.ingress.kubernetes.io/backend-protocol: HTTPS`

// TestIngressPassthrough reaches two TLS backends from the laptop through the harness' ingress
// controller, by the server name the client sends: the IngressClass and the controller's
// LoadBalancer Service installed, the Ingresses' status showing its address, each host leading
// to its own backend whose certificate the client verifies (TLS ends in the pod, not in the
// controller), host names the laptop resolves through AddHost (curl, openssl s_client), and
// connections closed for an unknown server name, none, an Ingress without passthrough, one of
// another class and one deleted.
func TestIngressPassthrough(t *testing.T) {
	if !harness.InNetns() {
		t.Skip("no service proxy outside the harness' network namespace")
	}
	c := harness.Start(t, harness.Options{})
	ctx := context.Background()
	const ns = "ingress"
	const hostA, hostB, hostPlain, hostOther = "a.ingress.example", "b.ingress.example", "plain.ingress.example", "other.ingress.example"

	// What `kubectl get ingressclass` shows, and the controller's address from the pool.
	if got := c.MustKubectl("get", "ingressclass", harness.DefaultIngressClass, "-o", "jsonpath={.spec.controller}"); got != harness.IngressController {
		t.Errorf("IngressClass %s: controller %q, want %q", harness.DefaultIngressClass, got, harness.IngressController)
	}
	ip := c.IngressIP()
	if a, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix(c.LoadBalancerPool).Contains(a) {
		t.Fatalf("IngressIP %q, not in the load-balancer pool %s", ip, c.LoadBalancerPool)
	}
	if got := c.LoadBalancerIP(harness.IngressNamespace, harness.IngressService, 30*time.Second); got != ip {
		t.Errorf("IngressIP %s, but the controller's Service has %s", ip, got)
	}

	ca := newTestCA(t)
	caFile := filepath.Join(c.Dir, "ingress-ca.pem")
	if err := os.WriteFile(caFile, ca.certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	c.Apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: ingress}\n")
	for name, host := range map[string]string{"web-a": hostA, "web-b": hostB} {
		crt, key := ca.issue(t, host)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-tls", Namespace: ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
		if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.Apply(fmt.Sprintf(ingressBackend, "web-a", "{name: kafka-tls, port: 9093, targetPort: 8443}") + "---" +
		fmt.Sprintf(ingressBackend, "web-b", "{name: http, port: 80, targetPort: 8080}, {name: https, port: 443, targetPort: 8443}") + "---" +
		fmt.Sprintf(ingressRule, "web-a", "nginx", hostA, "{name: web-a, port: {number: 9093}}", passthrough) + "---" +
		fmt.Sprintf(ingressRule, "web-b", "nginx", hostB, "{name: web-b, port: {name: https}}", passthrough) + "---" +
		fmt.Sprintf(ingressRule, "plain", "nginx", hostPlain, "{name: web-a, port: {number: 9093}}", "") + "---" +
		fmt.Sprintf(ingressRule, "other", "other", hostOther, "{name: web-a, port: {number: 9093}}", passthrough))
	podA, podB := readyPod(c, ns, "app=web-a", 90*time.Second), readyPod(c, ns, "app=web-b", 90*time.Second)

	// The served Ingresses show the controller's address, as ingress-nginx publishes its
	// Service's; the others are not touched.
	c.WaitJSONPath(30*time.Second, ns, "ingress", "web-a", ".status.loadBalancer.ingress[0].ip", ip)
	c.WaitJSONPath(30*time.Second, ns, "ingress", "web-b", ".status.loadBalancer.ingress[0].ip", ip)
	for _, name := range []string{"plain", "other"} {
		if got := c.JSONPath(ns, "ingress", name, ".status.loadBalancer.ingress"); got != "" {
			t.Errorf("Ingress %s is not served, but its status says %s", name, got)
		}
	}

	// The laptop resolves the hosts as a user's DNS would make it.
	laptop, err := c.Laptop()
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{hostA, hostB, hostPlain, hostOther, "nobody.ingress.example"} {
		if err := laptop.AddHost(host, ip); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := laptop.Command("getent", "hosts", hostA).CombinedOutput(); err != nil || !strings.HasPrefix(string(out), ip+" ") {
		t.Errorf("getent hosts %s on the laptop: %v: %q, want %s", hostA, err, out, ip)
	}
	if err := laptop.AddHost("two words", ip); err == nil {
		t.Error("AddHost took a name with a space")
	}

	// Each host reaches its own backend, whose certificate (the test CA's, for that host) the
	// client verifies: the handshake is the pod's.
	expectTLSWhoami(c, laptop, ca.pool, hostA, podA.Name)
	expectTLSWhoami(c, laptop, ca.pool, hostB, podB.Name)
	out, err := laptop.Command("curl", "-sS", "--max-time", "10", "--cacert", caFile, "https://"+hostB+"/whoami").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != podB.Name {
		t.Errorf("curl https://%s/whoami on the laptop: %v: %q, want %q", hostB, err, out, podB.Name)
	}
	sclient := laptop.Command("openssl", "s_client", "-connect", net.JoinHostPort(ip, "443"), "-servername", hostA,
		"-CAfile", caFile, "-verify_return_error", "-verify_hostname", hostA)
	sclient.Stdin = strings.NewReader("")
	out, err = sclient.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Verify return code: 0 (ok)") || !strings.Contains(string(out), hostA) {
		t.Errorf("openssl s_client -servername %s on the laptop: %v:\n%s", hostA, err, out)
	}

	// No rule for the name, no name at all, an Ingress that does not ask for passthrough or is
	// of another class: closed.
	for _, addr := range []string{"nobody.ingress.example:443", hostPlain + ":443", hostOther + ":443"} {
		expectTLSClosed(t, laptop, addr, "")
	}
	expectTLSClosed(t, laptop, net.JoinHostPort(ip, "443"), "no server name")

	// An Ingress deleted stops routing its host; the other keeps its own.
	c.MustKubectl("-n", ns, "delete", "ingress", "web-b")
	c.Eventually(30*time.Second, hostB+" closed once its Ingress is gone", func() (bool, error) {
		cert, err := tlsHandshake(laptop, hostB+":443", &tls.Config{RootCAs: ca.pool})
		return err != nil, fmt.Errorf("reached %s", cert)
	})
	expectTLSWhoami(c, laptop, ca.pool, hostA, podA.Name)
}

// expectTLSWhoami waits until GET https://host/whoami from the laptop (host resolved by its
// hosts file, the server name host, the certificate verified against roots) answers want, and
// checks that the certificate is the backend's own for host.
func expectTLSWhoami(c *harness.Cluster, laptop *harness.Laptop, roots *x509.CertPool, host, want string) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: laptop.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
	c.Eventually(30*time.Second, "GET https://"+host+"/whoami from the laptop", func() (bool, error) {
		resp, err := client.Get("https://" + host + "/whoami")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		cn := resp.TLS.PeerCertificates[0].Subject.CommonName
		return err == nil && strings.TrimSpace(string(body)) == want && cn == host,
			fmt.Errorf("got %q (%v) from a certificate for %s", body, err, cn)
	})
}

// expectTLSClosed checks that a TLS handshake through the ingress controller at addr (a name of
// the laptop's hosts file, sent as the server name, or an address: none is sent) fails.
func expectTLSClosed(t *testing.T, laptop *harness.Laptop, addr, what string) {
	t.Helper()
	if cert, err := tlsHandshake(laptop, addr, &tls.Config{InsecureSkipVerify: true}); err == nil {
		t.Errorf("TLS to %s %s from the laptop reached a server (certificate for %s), want the connection closed", addr, what, cert)
	}
}

// tlsHandshake shakes hands with TLS from the laptop at addr and returns the name of the
// server's certificate.
func tlsHandshake(laptop *harness.Laptop, addr string, cfg *tls.Config) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := laptop.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	cfg = cfg.Clone()
	if host, _, _ := net.SplitHostPort(addr); net.ParseIP(host) == nil {
		cfg.ServerName = host
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// testCA is a certificate authority of the test's own, which the ingress controller never sees.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	pool    *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kaas e2e ingress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: pool}
}

// issue is a server certificate and key for host, PEM.
func (ca *testCA) issue(t *testing.T, host string) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}
