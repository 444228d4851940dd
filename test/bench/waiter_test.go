package bench

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls/waiter"
	"toolgate.dev/toolgate/internal/provider"
)

// waiterServerEnv names the file the long-poll server writes its URL and certificate into; set, the
// test binary serves (TestWaiterServer) instead of testing.
const waiterServerEnv = "TOOLGATE_BENCH_WAITER_SERVER"

// BenchmarkWaiter measures what the waiter and the provider client hold for each waiting request, in
// this process alone: the provider runs in a process of its own, so its goroutines and buffers are
// not counted. 1,000 requests are long-polled over HTTPS with HTTP/2, as in the pending benchmark;
// the server answers "pending" when each wait ends, and the figures are read once every request has
// been answered twice, so that a goroutine's stack has been through reading an answer.
func BenchmarkWaiter(b *testing.B) {
	const n = 1000
	const wait = 2 * time.Second
	g := NewWithT(b)
	url, caFile, answered := startWaiterServer(b)
	cred := filepath.Join(b.TempDir(), "credential")
	g.Expect(os.WriteFile(cred, []byte("bench-credential"), 0o600)).To(Succeed())
	caPEM, err := os.ReadFile(caFile)
	g.Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(caPEM)).To(BeTrue())
	client, err := provider.NewHTTPClient(provider.Options{BaseURL: url, CredentialFile: cred, CAFile: caFile})
	g.Expect(err).NotTo(HaveOccurred())
	ref, err := waiterSubmission.Ref()
	g.Expect(err).NotTo(HaveOccurred())
	ref.ID = "request-1"

	for range b.N {
		w := waiter.New(wait, logr.Discard())
		before := memStats()
		g0 := runtime.NumGoroutine()
		start := answered()
		for i := range n {
			tc := &tg.ToolCall{}
			tc.Namespace, tc.Name, tc.UID = "bench", fmt.Sprintf("call-%d", i), types.UID(fmt.Sprintf("uid-%d", i))
			w.Ensure(tc, client, ref, time.Hour)
		}
		g.Eventually(answered).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).
			Should(BeNumerically(">=", start+3*n), "every request answered twice or more")
		after := memStats()
		goroutines := runtime.NumGoroutine() - g0
		stacks := float64(after.StackInuse-before.StackInuse) / n / 1024
		heap := float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / n / 1024
		b.ReportMetric(stacks, "stack-KiB/request")
		b.ReportMetric(heap, "heap-KiB/request")
		b.ReportMetric(float64(goroutines)/n, "goroutines/request")
		b.Logf("%d waiting requests: %.2f goroutines, %.1f KiB of stacks and %.1f KiB of heap in use each", n, float64(goroutines)/n, stacks, heap)
		for i := range n {
			w.Stop(types.UID(fmt.Sprintf("uid-%d", i)))
		}
	}
}

var waiterSubmission = provider.Submission{Tool: "issue_refund", Arguments: []byte(`{"amount":1}`)}

func memStats() runtime.MemStats {
	runtime.GC()
	runtime.GC() // the second cycle shrinks stacks the first found oversized
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// startWaiterServer runs TestWaiterServer in a child process and returns its URL, its CA file and a
// function that reads how many answers it has written so far.
func startWaiterServer(b *testing.B) (url, caFile string, answered func() int64) {
	dir := b.TempDir()
	info := filepath.Join(dir, "server")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestWaiterServer$")
	cmd.Env = append(os.Environ(), waiterServerEnv+"="+info)
	stdout, err := cmd.StdoutPipe()
	NewWithT(b).Expect(err).NotTo(HaveOccurred())
	NewWithT(b).Expect(cmd.Start()).To(Succeed())
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "serving" {
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	data, err := os.ReadFile(info)
	NewWithT(b).Expect(err).NotTo(HaveOccurred(), "the long-poll server did not start")
	u, cert, _ := bytes.Cut(data, []byte("\n")) // the URL's line, then the certificate
	caFile = filepath.Join(dir, "ca.pem")
	NewWithT(b).Expect(os.WriteFile(caFile, cert, 0o600)).To(Succeed())
	pool := x509.NewCertPool()
	NewWithT(b).Expect(pool.AppendCertsFromPEM(cert)).To(BeTrue())
	// A client of its own, so that reading the count does not touch the waiter's connections.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	b.Cleanup(hc.CloseIdleConnections)
	answered = func() int64 {
		resp, err := hc.Get(string(u) + answeredPath)
		if err != nil {
			return -1
		}
		defer func() { _ = resp.Body.Close() }()
		var count int64
		if _, err := fmt.Fscan(resp.Body, &count); err != nil {
			return -1
		}
		return count
	}
	return string(u), caFile, answered
}

// answeredPath is where the long-poll server tells how many answers it has written.
const answeredPath = "/answered"

// TestWaiterServer is BenchmarkWaiter's provider: it holds each long poll for its whole wait, then
// answers that the request is still pending, and counts its answers (GET /answered). It runs only in
// the child process the benchmark starts.
func TestWaiterServer(t *testing.T) {
	info := os.Getenv(waiterServerEnv)
	if info == "" {
		t.Skip("runs only as BenchmarkWaiter's server")
	}
	ref, err := waiterSubmission.Ref()
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"id":"request-1","tool":%q,"arguments":%s,"timeout":"30m","status":"pending","created_at":"2026-01-01T00:00:00Z","deadline_at":"2036-01-01T00:30:00Z"}`,
		ref.Tool, waiterSubmission.Arguments)
	var answered atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == answeredPath {
			_, _ = fmt.Fprint(w, answered.Load())
			return
		}
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", provider.ContentTypeJSON)
		if _, err := io.WriteString(w, body); err == nil {
			answered.Add(1)
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(info, append([]byte(srv.URL+"\n"), cert...), 0o600); err != nil {
		t.Fatal(err)
	}
	fmt.Println("serving")
	select {}
}
