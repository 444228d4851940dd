package toolcalls

import (
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

func handoverReconciler(elected bool) *Reconciler {
	ch := make(chan struct{})
	if elected {
		close(ch)
	}
	return &Reconciler{asyncReads: newAsyncReads(), handed: newHandedNotes(), Elected: ch,
		notified: make(chan event.TypedGenericEvent[*tg.ToolCall], 4)}
}

func notificationOf(id string) tg.Notification {
	return tg.Notification{ID: id, ReceivedAt: metav1.NewTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))}
}

// A notification handed over is put into the status of the call's next reconcile, and its receiver is
// told once that reconcile's write landed.
func TestHandedNotificationIsRecordedByTheReconcile(t *testing.T) {
	g := NewWithT(t)
	r := handoverReconciler(true)
	tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "refund", UID: "u1"}}
	recorded, release := r.HandOver(tc, notificationOf("n1"))
	defer release()
	g.Expect(recorded).NotTo(BeNil())
	g.Expect(r.notified).To(HaveLen(1), "the call is queued")

	read := tc.DeepCopy()
	done := r.handed.take(read)
	g.Expect(read.Status.Notification).To(HaveField("ID", "n1"))
	g.Expect(recorded).NotTo(BeClosed(), "not before the write")
	done()
	g.Expect(recorded).To(BeClosed())

	again := tc.DeepCopy()
	r.handed.take(again)()
	g.Expect(again.Status.Notification).To(BeNil(), "recorded once")
}

// Table cases of what a reconcile takes: nothing handed over, a notification its status already
// shows, a duplicate delivery sharing the first's wait, a later notification replacing an earlier one,
// and one its receiver withdrew.
func TestHandedNotesTake(t *testing.T) {
	for _, c := range []struct {
		name    string
		hand    []string
		release []int // which hand-overs withdraw before the reconcile
		status  string
		want    string // the notification id in the status after take
		closed  []int  // which hand-overs are told after the write
	}{
		{name: "nothing handed over", want: ""},
		{name: "one", hand: []string{"n1"}, want: "n1", closed: []int{0}},
		{name: "already recorded", hand: []string{"n1"}, status: "n1", want: "n1", closed: []int{0}},
		{name: "a duplicate shares the wait", hand: []string{"n1", "n1"}, want: "n1", closed: []int{0, 1}},
		{name: "a later one replaces", hand: []string{"n1", "n2"}, want: "n2", closed: []int{1}},
		{name: "withdrawn", hand: []string{"n1"}, release: []int{0}, want: ""},
		{name: "an earlier one withdrawn keeps the later", hand: []string{"n1", "n2"}, release: []int{0}, want: "n2", closed: []int{1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			r := handoverReconciler(true)
			tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "refund", UID: "u1"}}
			var waits []<-chan struct{}
			var releases []func()
			for _, id := range c.hand {
				w, rel := r.HandOver(tc, notificationOf(id))
				waits, releases = append(waits, w), append(releases, rel)
			}
			for _, i := range c.release {
				releases[i]()
			}
			if c.status != "" {
				n := notificationOf(c.status)
				tc.Status.Notification = &n
			}
			r.handed.take(tc)()
			if c.want == "" {
				g.Expect(tc.Status.Notification).To(BeNil())
			} else {
				g.Expect(tc.Status.Notification).To(HaveField("ID", c.want))
			}
			for i, w := range waits {
				if slices.Contains(c.closed, i) {
					g.Expect(w).To(BeClosed(), "hand-over %d", i)
				} else {
					g.Expect(w).NotTo(BeClosed(), "hand-over %d", i)
				}
			}
		})
	}
}

// On a replica that does not lead, no reconcile runs: nothing is handed over, and the receiver
// records the notification itself at once.
func TestNoHandOverWithoutTheLead(t *testing.T) {
	g := NewWithT(t)
	r := handoverReconciler(false)
	tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "refund", UID: "u1"}}
	recorded, release := r.HandOver(tc, notificationOf("n1"))
	release()
	g.Expect(recorded).To(BeNil())
	r.handed.take(tc)()
	g.Expect(tc.Status.Notification).To(BeNil())
}
