package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestConformance runs the conformance suite (e2e/conformance/conformance.py: Kafka's own CLI
// tools, the Java client, franz-go and kafka-python) against the scenarios' cluster — the
// operator and three brokers in cluster mode on kaas-nfsfs — instead of a local-mode kaas.
// Topics the suite creates through the Kafka admin API become KafkaTopics, as in production.
// The suite judges the results against expected-failures-cluster.tsv: it fails on a failure the
// file does not list and on a listed one that passes.
//
// It needs what `make conformance-deps` fetches (the Kafka jars, franz-go's modules, the
// kafka-python virtualenv), so `make e2e-scenarios` leaves it out and `make conformance-cluster`
// runs it. Table: target/conformance/cluster-results.md; every call and the brokers' logs:
// target/conformance/cluster-logs/.
func TestConformance(t *testing.T) {
	root := repoRoot(t)
	dir := filepath.Join(root, "e2e", "conformance")
	out := filepath.Join(root, "target", "conformance", "cluster-results.md")
	logs := filepath.Join(root, "target", "conformance", "cluster-logs")

	// The suite's verdict again at the very end, after the harness' logs of a failed test
	// (cleanups run last-registered first), where a CI log's tail shows it.
	var verdict string
	t.Cleanup(func() {
		if t.Failed() && verdict != "" {
			t.Logf("conformance against the e2e cluster, once more:%s", verdict)
		}
	})
	e := startCluster(t)
	seeds := e.seeds()
	// Serving: every broker, asked itself, names all three.
	for _, seed := range seeds {
		e.Eventually(time.Minute, seed+" to list the three brokers", func() (bool, error) {
			n := brokersSeenBy(seed)
			return n == 3, fmt.Errorf("it lists %d", n)
		})
	}

	cmd := exec.Command("python3", filepath.Join(dir, "conformance.py"),
		"--brokers", "kaas", "--kaas-bootstrap", strings.Join(seeds, ","), "--kaas-label", "kaas (e2e cluster)",
		"--expected", filepath.Join(dir, "expected-failures-cluster.tsv"), "--out", out, "--logs", logs)
	cmd.Dir = root
	var table bytes.Buffer
	cmd.Stdout = &table
	// Progress (one line per scenario) as it happens; a run takes a few minutes.
	progress, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(progress)
	for lines.Scan() {
		t.Log(lines.Text())
	}
	err = cmd.Wait()
	t.Logf("conformance.py took %s:\n%s", time.Since(start).Round(time.Second), table.String())
	if i := strings.Index(table.String(), "\nconformance FAILED:"); i >= 0 {
		verdict = table.String()[i:]
	}

	// The brokers' side of every call, beside the calls (the harness prints them only on failure).
	for i := range 3 {
		pod := fmt.Sprintf("kc-%d", i)
		if werr := os.WriteFile(filepath.Join(logs, "kaas", "broker-"+pod+".log"), []byte(e.PodLogs(ns, pod, "kaas")), 0o644); werr != nil {
			t.Logf("keeping %s's log: %v", pod, werr)
		}
	}
	if err != nil {
		t.Fatalf("conformance against the e2e cluster: %v (table above and in %s, calls in %s)", err, out, logs)
	}
}

// brokersSeenBy is how many brokers the Metadata answer of the broker at addr lists (0 on error).
func brokersSeenBy(addr string) int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return 0
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return 0
	}
	return len(m.Brokers)
}
