package toolcalls

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

func toolCallAtVersion(uid types.UID, rv string) *tg.ToolCall {
	tc := &tg.ToolCall{}
	tc.UID = uid
	tc.ResourceVersion = rv
	return tc
}

func TestWriteLogDetectsAStaleRead(t *testing.T) {
	for _, c := range []struct {
		name    string
		written string // "" when nothing was written
		cached  string
		behind  bool
	}{
		{name: "nothing written", written: "", cached: "100", behind: false},
		{name: "the cache is from before the write", written: "120", cached: "100", behind: true},
		{name: "the cache has the write", written: "120", cached: "120", behind: false},
		{name: "the cache has a later write of someone else", written: "120", cached: "135", behind: false},
		{name: "more digits is later", written: "1000", cached: "999", behind: true},
		{name: "a version the apiserver did not issue is taken as it is", written: "120", cached: "x1", behind: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			var l writeLog
			l.wrote(toolCallAtVersion("uid-1", c.written))
			g.Expect(l.behind(toolCallAtVersion("uid-1", c.cached))).To(Equal(c.behind))
			g.Expect(l.behind(toolCallAtVersion("uid-2", c.cached))).To(BeFalse(), "another ToolCall is not held back")
			if !c.behind {
				g.Expect(l.versions).NotTo(HaveKey(types.UID("uid-1")), "an entry goes once the cache caught up")
			}
		})
	}
}

func TestWriteLogForgetsADeletedToolCall(t *testing.T) {
	g := NewWithT(t)
	var l writeLog
	l.wrote(toolCallAtVersion("uid-1", "120"))
	l.forget("uid-1")
	g.Expect(l.behind(toolCallAtVersion("uid-1", "100"))).To(BeFalse())
	g.Expect(l.versions).To(BeEmpty())
}
