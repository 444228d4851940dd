package waiter_test

import (
	"context"
	"fmt"
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
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls/waiter"
	"toolgate.dev/toolgate/internal/provider"
)

// A reconcile still in flight when the manager stops may ask the waiter to follow a request: the
// stopped waiter follows nothing more, and (under the race detector) starting a poller then would
// race with the waiter's wait for its pollers to end.
func TestStoppedWaiterFollowsNoNewRequest(t *testing.T) {
	g := NewWithT(t)
	var polls atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		<-r.Context().Done() // a long poll that never ends with an answer
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	credFile := filepath.Join(t.TempDir(), "credential")
	g.Expect(os.WriteFile(credFile, []byte(credential), 0o600)).To(Succeed())
	client, err := provider.NewHTTPClient(provider.Options{BaseURL: "http://" + ln.Addr().String(), CredentialFile: credFile})
	g.Expect(err).NotTo(HaveOccurred())
	ref, err := provider.Submission{Tool: "issue_refund", Arguments: []byte(refundArgs)}.Ref()
	g.Expect(err).NotTo(HaveOccurred())
	ref.ID = "req-1"
	call := func(i int) *tg.ToolCall {
		return &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Name: "refund", Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", i))}}
	}

	w := waiter.New(30*time.Second, logr.Discard())
	ctx, stop := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- w.Start(ctx) }()
	w.Ensure(call(0), client, ref, time.Minute)
	g.Eventually(polls.Load).WithTimeout(5 * time.Second).Should(BeEquivalentTo(1))

	// Reconciles keep asking while the waiter stops.
	quit, asked := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(asked)
		for i := 1; ; i++ {
			select {
			case <-quit:
				return
			default:
				w.Ensure(call(i), client, ref, time.Minute)
			}
		}
	}()
	stop()
	g.Eventually(started).WithTimeout(10 * time.Second).Should(Receive(BeNil()))
	close(quit)
	<-asked

	before := polls.Load()
	late := call(-1)
	g.Expect(w.Ensure(late, client, ref, time.Minute)).To(Equal(time.Minute))
	g.Consistently(polls.Load, time.Second).Should(Equal(before), "a stopped waiter polls nothing")
	_, observed := w.Latest(late.UID)
	g.Expect(observed).To(BeFalse())
}
