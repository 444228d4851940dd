package waiter_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls/waiter"
	"toolgate.dev/toolgate/internal/provider"
)

const (
	credential = "waiter-test-credential"
	refundArgs = `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`
)

// A provider that ignores ?wait= answers every poll at once with the pending request: the waiter
// polls it about once a second, not in a loop.
func TestWaiterPacesAProviderThatIgnoresWait(t *testing.T) {
	g := NewWithT(t)
	var gets atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		gets.Add(1)
		w.Header().Set("Content-Type", provider.ContentTypeJSON)
		_, _ = w.Write([]byte(`{"id":"req-1","tool":"issue_refund","arguments":` + refundArgs +
			`,"timeout":"30m","status":"pending","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z"}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	credFile := filepath.Join(t.TempDir(), "credential")
	g.Expect(os.WriteFile(credFile, []byte(credential), 0o600)).To(Succeed())
	client, err := provider.NewHTTPClient(provider.Options{BaseURL: "http://" + ln.Addr().String(), CredentialFile: credFile})
	g.Expect(err).NotTo(HaveOccurred())

	w := waiter.New(30*time.Second, logr.Discard())
	ref, err := provider.Submission{Tool: "issue_refund", Arguments: []byte(refundArgs)}.Ref()
	g.Expect(err).NotTo(HaveOccurred())
	ref.ID = "req-1"
	tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Name: "refund", Namespace: "default", UID: "uid-1"}}
	w.Ensure(tc, client, ref, time.Minute)
	t.Cleanup(func() { w.Stop(tc.UID) })

	g.Eventually(gets.Load).WithTimeout(5 * time.Second).Should(BeNumerically(">=", 2))
	start, before := time.Now(), gets.Load()
	g.Consistently(func() bool {
		elapsed := time.Since(start)
		return gets.Load()-before <= int64(elapsed/time.Second)+1
	}).WithTimeout(3*time.Second).WithPolling(50*time.Millisecond).Should(BeTrue(), "at most one poll a second")
	g.Expect(gets.Load()-before).To(BeNumerically(">=", 2), "polling goes on")
	_, observed := w.Latest(tc.UID)
	g.Expect(observed).To(BeFalse(), "an unchanged pending request is nothing to report")
}
