package mcpgateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/test/mcpeverything"
)

// One place for agents: an agent built on the official TypeScript SDK calls, through the gateway, a
// tool of the reference MCP server that an MCPServer exposes; a human approves, the call's Job runs
// mcp-call (here in the test's process, with the Job's env as the kubelet gives it), and the agent
// gets the downstream tool's own result.
func TestAgentCallsAnMCPServersToolThroughTheGateway(t *testing.T) {
	w := newWorld(t, Options{WaitingLimit: 2 * time.Minute})
	g := w.G
	ctx := context.Background()
	everything := mcpeverything.Start(t)
	g.Expect(w.K8s.Create(ctx, &tg.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "everything", Namespace: w.NS},
		Spec: tg.MCPServerSpec{URL: everything.URL, AllowInsecureHTTP: true, Tools: []string{"echo"}, ExecutorImage: "mcp-call:test",
			ToolTemplate: tg.MCPToolTemplate{ExecutionTimeout: &metav1.Duration{Duration: 20 * time.Second}}},
	})).To(Succeed())
	g.Eventually(func(g Gomega) metav1.ConditionStatus {
		tool := &tg.Tool{}
		g.Expect(w.K8s.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: "everything--echo"}, tool)).To(Succeed())
		c := meta.FindStatusCondition(tool.Status.Conditions, tg.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		return c.Status
	}).Should(Equal(metav1.ConditionTrue))

	a := w.startTSAgent("everything__echo", `{"message":"approved by a human"}`)
	g.Eventually(a.lines).WithTimeout(60 * time.Second).Should(ContainElement("listed everything__echo"))
	name := w.toolCallName()
	w.Approve(w.PendingRequest(name).ID, 5*time.Minute)
	running := w.WaitPhase(name, tg.PhaseRunning)

	jobs := w.Jobs()
	g.Expect(jobs).To(HaveLen(1))
	env := map[string]string{}
	for _, e := range jobs[0].Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = strings.ReplaceAll(e.Value, "$$", "$")
	}
	o := mcpcall.Run(ctx, mcpcall.FromEnv(func(k string) string { return env[k] }, "test"))
	g.Expect(o.Code).To(Equal(mcpcall.ExitSucceeded), o.Message)
	w.FinishJob(running.Status.JobName, true, o.Message)

	var line string
	g.Eventually(func() string {
		for _, l := range a.lines() {
			if strings.HasPrefix(l, "result ") {
				line = l
			}
		}
		return line
	}).WithTimeout(60 * time.Second).ShouldNot(BeEmpty())
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &res)).To(Succeed())
	g.Expect(res.IsError).To(BeFalse(), line)
	g.Expect(res.Content).To(HaveLen(1))
	g.Expect(res.Content[0].Text).To(Equal("Echo: approved by a human"))
}
