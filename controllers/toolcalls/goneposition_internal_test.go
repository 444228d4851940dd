package toolcalls

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// hold holds the removal of the ToolCall named and identified by uid, seen at rv.
func hold(g *goneCalls, uid, rv string, before *uint64) {
	g.add(&tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid), ResourceVersion: rv}}, time.Now(), before)
}

// release forgets the removal of uid: it was withdrawn.
func release(g *goneCalls, uid string) {
	g.done(types.NamespacedName{Namespace: "ns", Name: uid}, types.UID(uid))
}

// The saved position never passes a removal that is not withdrawn yet, never goes back before what
// was saved when the leader started, and stays there until the replay is done.
func TestGonePosition(t *testing.T) {
	ptr := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name string
		run  func(c *goneCalls)
		want uint64
		ok   bool
	}{
		{name: "nothing seen", run: func(*goneCalls) {}, want: 0, ok: false},
		{name: "before the replay: the saved position", run: func(c *goneCalls) {
			c.replayed = false
			c.observe("90")
		}, want: 50, ok: true},
		{name: "events move it", run: func(c *goneCalls) { c.observe("70"); c.observe("60") }, want: 70, ok: true},
		{name: "never before the saved position", run: func(c *goneCalls) { c.observe("20") }, want: 50, ok: true},
		{name: "a held removal holds it back", run: func(c *goneCalls) {
			c.observe("70")
			hold(c, "a", "80", nil)
			c.observe("95")
		}, want: 70, ok: true},
		{name: "released, it moves on", run: func(c *goneCalls) {
			c.observe("70")
			hold(c, "a", "80", nil)
			c.observe("95")
			release(c, "a")
		}, want: 95, ok: true},
		{name: "a replayed removal holds it at the saved position", run: func(c *goneCalls) {
			hold(c, "r", "60", ptr(50))
			c.observe("99")
		}, want: 50, ok: true},
		{name: "the oldest of several", run: func(c *goneCalls) {
			c.observe("70")
			hold(c, "a", "80", nil)
			hold(c, "b", "90", nil)
			release(c, "a")
		}, want: 80, ok: true},
		{name: "a removal replaced under its name holds it no more", run: func(c *goneCalls) {
			c.observe("70")
			hold(c, "a", "80", nil)
			c.add(&tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "a-2", ResourceVersion: "90"}}, time.Now(), nil)
			c.observe("95")
		}, want: 80, ok: true},
		{name: "opaque resourceVersions: none", run: func(c *goneCalls) { c.observe("a1b2") }, want: 0, ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &goneCalls{start: 50, replayed: true}
			if tc.name == "nothing seen" {
				c.start = 0
			}
			tc.run(c)
			got, ok := c.position()
			if got != tc.want || ok != tc.ok {
				t.Errorf("position() = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// The oldest position the apiserver serves is read from its 410 answer to a watch from an older one;
// any other answer is not a position too old.
func TestOldestServed(t *testing.T) {
	gr := schema.GroupResource{Group: "toolgate.dev", Resource: "toolcalls"}
	for _, tc := range []struct {
		name    string
		err     error
		want    uint64
		expired bool
	}{
		{name: "the watch cache's answer", err: apierrors.NewResourceExpired("too old resource version: 1 (5120)"), want: 5120, expired: true},
		{name: "etcd's compaction, without a position", err: apierrors.NewResourceExpired("The resourceVersion for the provided watch is too old."), want: 0, expired: true},
		{name: "410 Gone", err: apierrors.NewGone("too old resource version: 7 (90)"), want: 90, expired: true},
		{name: "a bare number is not taken", err: apierrors.NewResourceExpired("too old resource version: 7"), want: 0, expired: true},
		{name: "another error", err: apierrors.NewNotFound(gr, "x"), want: 0, expired: false},
		{name: "none", err: nil, want: 0, expired: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, expired := oldestServed(tc.err)
			if got != tc.want || expired != tc.expired {
				t.Errorf("oldestServed(%v) = %d, %v; want %d, %v", tc.err, got, expired, tc.want, tc.expired)
			}
		})
	}
}
