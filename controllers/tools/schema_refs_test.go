package tools_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// A Tool whose argumentsSchema refers to the manager's files (a JSON file, a FIFO that would block a
// reader) is not Ready, with a message that names spec.argumentsSchema and the fix, and its calls are
// rejected; meanwhile another Tool is Ready and its calls reach a human: the FIFO stalls nothing.
func TestSchemaRefsOutsideTheSchemaAreRefused(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	ctx := context.Background()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	g.Expect(syscall.Mkfifo(fifo, 0o600)).To(Succeed())
	secret := filepath.Join(dir, "secret.json")
	g.Expect(os.WriteFile(secret, []byte(`{"type":"object","title":"manager-secret"}`), 0o600)).To(Succeed())

	for name, ref := range map[string]string{"reads-fifo": "file://" + fifo, "reads-file": "file://" + secret} {
		h.Tool(name, name, `{"type":"object","properties":{"a":{"$ref":"`+ref+`"}}}`)
	}
	h.Tool("fine", "fine", `{"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"$defs":{"a":{"type":"integer"}}}`)

	ready := func(name string) func(Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			tool := &tg.Tool{}
			g.Expect(h.K8s.Get(ctx, client.ObjectKey{Namespace: h.NS, Name: name}, tool)).To(Succeed())
			c := meta.FindStatusCondition(tool.Status.Conditions, tg.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			return c
		}
	}
	for _, name := range []string{"reads-fifo", "reads-file"} {
		g.Eventually(ready(name)).WithTimeout(30*time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", tg.ReasonInvalidArgumentsSchema),
			HaveField("Message", ContainSubstring("spec.argumentsSchema may refer only to its own parts")),
			HaveField("Message", ContainSubstring("put the referenced schema under $defs")),
			HaveField("Message", Not(ContainSubstring("manager-secret")))), name)
	}
	g.Eventually(ready("fine")).Should(HaveField("Status", metav1.ConditionTrue))

	h.ToolCall("to-fifo", "reads-fifo", `{"a":1}`, time.Minute, nil)
	rejected := h.WaitPhase("to-fifo", tg.PhaseRejected)
	g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonInvalidTool))
	g.Expect(rejected.Status.Message).To(ContainSubstring("spec.argumentsSchema may refer only to its own parts"))

	h.ToolCall("to-fine", "fine", `{"a":1}`, time.Minute, nil)
	h.PendingRequest("to-fine")
}
