package rbactest_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The requests of the access table on MCPServers.

func mcpServerObject(f *fixture, ns string) *tg.MCPServer {
	return &tg.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name("mcp")},
		Spec:       tg.MCPServerSpec{URL: "https://mcp.example.com/mcp", ExecutorImage: "mcp-call:v0.1.0", Tools: []string{"echo"}},
	}
}

func createMCPServer(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error { return c.Create(f.ctx, mcpServerObject(f, ns)) }
}

func listMCPServers(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		return c.List(f.ctx, &tg.MCPServerList{}, client.InNamespace(ns))
	}
}

func getMCPServerStatus(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		s := f.must(mcpServerObject(f, ns))
		return c.SubResource("status").Get(f.ctx, s, &tg.MCPServer{})
	}
}

// patchMCPServerStatus reports the server Ready, as the manager's MCPServer controller does.
func patchMCPServerStatus(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		s := f.must(mcpServerObject(f, ns)).(*tg.MCPServer)
		base := s.DeepCopy()
		s.Status.ObservedGeneration = s.Generation
		s.Status.Conditions = []metav1.Condition{{Type: tg.ConditionReady, Status: metav1.ConditionTrue, Reason: tg.ReasonToolsDiscovered,
			Message: fmt.Sprintf("The server lists %d tools.", 1), LastTransitionTime: metav1.Now()}}
		return c.Status().Patch(f.ctx, s, client.MergeFrom(base))
	}
}

// patchToolSpec changes a Tool's spec with a merge patch, as the MCPServer controller keeps the Tools
// it generated in step with their server.
func patchToolSpec(ns string) func(*fixture, client.WithWatch) error {
	return func(f *fixture, c client.WithWatch) error {
		tool := f.must(f.toolObject(ns)).(*tg.Tool)
		base := tool.DeepCopy()
		tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: 42e9}
		return c.Patch(f.ctx, tool, client.MergeFrom(base))
	}
}
