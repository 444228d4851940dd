// Package conformance runs Toolgate's manager, against envtest, as the synchronous adapter of the Agent
// Approval Protocol v1, facing a provider it did not write: test/aapstrict, a strict provider built
// from the published contract alone. Each of the eight items of the adapter checklist (specification
// section 8, "Adapter Requirements") is one test, TestAdapter1_… to TestAdapter8_…, which drives real
// ToolCalls over real sockets and asserts the outcome on the ToolCall, at the provider (its state and
// exchange log) and on Jobs. After every test the provider's log must hold no 400, 404 or 409: a
// conforming adapter never sends what the contract refuses. quorum_test.go runs the manager against
// the reference provider with an instance quorum of two: the decision the adapter sees after votes.
//
//	go test ./test/conformance/ -v
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/aapstrict"
	th "toolgate.dev/toolgate/test/testharness"
)

var env *th.Env

// agent is the user the Go client acts as: it holds nothing but the agent ClusterRole from
// config/rbac/toolcall_agent_role.yaml, bound per test namespace by agent.Bind.
var agent *th.Agent

func TestMain(m *testing.M) {
	th.Main(m, &env, func(e *th.Env) (err error) {
		agent, err = e.AddAgent("")
		return err
	})
}

// credential is the instance credential the strict provider accepts and the manager is given.
const credential = "conformance-instance-credential"

// approvalNote is the note of every human approval in these tests.
const approvalNote = "The duplicate charge has been confirmed."

// world is one scenario: a strict provider on loopback, and a harness (namespace, manager) whose
// provider client points at it, with the refund Tool.
type world struct {
	*th.Harness
	P *aapstrict.Server
}

// newWorld starts a strict provider (changed by provider when not nil) and a harness pointed at it.
// When the test ends, after the manager has stopped, the provider's log is checked for refusals.
func newWorld(t *testing.T, provider func(*aapstrict.Options), opts ...th.Option) *world {
	t.Helper()
	o := aapstrict.Options{Credential: credential}
	if provider != nil {
		provider(&o)
	}
	p, err := aapstrict.New(o)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	base := p.Start()
	// Cleanups run last-registered first: these two run after the harness has stopped the manager.
	t.Cleanup(p.Close)
	t.Cleanup(func() { expectNoRefusals(t, p) })
	h := th.New(t, env, append([]th.Option{th.WithExternalProvider(base, credential)}, opts...)...)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	return &world{Harness: h, P: p}
}

// expectNoRefusals fails the test if the provider answered any exchange 400, 404 or 409.
func expectNoRefusals(t *testing.T, p *aapstrict.Server) {
	t.Helper()
	var refused []string
	for _, ex := range p.Log() {
		switch ex.Status {
		case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict:
			refused = append(refused, describe(ex))
		}
	}
	if len(refused) > 0 {
		t.Errorf("the strict provider refused %d of the adapter's requests (a conforming adapter provokes no 400, 404 or 409):\n  %s",
			len(refused), strings.Join(refused, "\n  "))
	}
}

func describe(ex aapstrict.Exchange) string {
	s := ex.Method + " " + ex.Path
	if ex.Query != "" {
		s += "?" + ex.Query
	}
	s += fmt.Sprintf(" -> %d", ex.Status)
	if ex.Code != "" {
		s += " " + ex.Code
	}
	if ex.Dropped {
		s += " (answer dropped)"
	}
	return s
}

// pending waits until the ToolCall awaits approval and returns its request at the provider, checking
// that status.requestID and the Idempotency-Key (the ToolCall's UID) both name it.
func (w *world) pending(name string) aapstrict.Request {
	w.T.Helper()
	tc := w.WaitPhase(name, tg.PhaseAwaitingApproval)
	req, ok := w.P.Get(tc.Status.RequestID)
	w.G.Expect(ok).To(BeTrue(), "status.requestID %q is a request the provider holds", tc.Status.RequestID)
	byKey, ok := w.P.ByKey(string(tc.UID))
	w.G.Expect(ok).To(BeTrue(), "the request was submitted with Idempotency-Key = the ToolCall's UID")
	w.G.Expect(byKey.ID).To(Equal(req.ID))
	return req
}

// approve approves a request for validity, as a human would.
func (w *world) approve(id string, validity time.Duration) aapstrict.Request {
	w.T.Helper()
	r, err := w.P.Approve(id, validity, approvalNote)
	w.G.Expect(err).NotTo(HaveOccurred())
	return r
}

// exchanges returns the logged exchanges about one request: its submissions (by key) and the reads
// and cancellations of its id.
func (w *world) exchanges(key, id string) []aapstrict.Exchange {
	var out []aapstrict.Exchange
	for _, ex := range w.P.Log() {
		if (ex.Method == http.MethodPost && ex.IdempotencyKey == key) || (id != "" && strings.HasSuffix(ex.Path, "/v1/requests/"+id)) {
			out = append(out, ex)
		}
	}
	return out
}

func methods(exs []aapstrict.Exchange, method string) []aapstrict.Exchange {
	var out []aapstrict.Exchange
	for _, ex := range exs {
		if ex.Method == method {
			out = append(out, ex)
		}
	}
	return out
}

// toolCallWithReason creates a ToolCall as an agent would write it, with spec.reason, through the
// unstructured API (the typed one need not know the field), and returns spec.reason as the apiserver
// stored it: "" when its schema does not carry the field yet.
func (w *world) toolCallWithReason(name, tool, args string, waitingLimit time.Duration, timeout *time.Duration, reason string) string {
	w.T.Helper()
	// Numbers stay exact (json.Number), as an agent's kubectl would send them.
	var arguments map[string]any
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	w.G.Expect(dec.Decode(&arguments)).To(Succeed())
	spec := map[string]any{"tool": tool, "arguments": arguments, "waitingLimit": waitingLimit.String(), "reason": reason}
	if timeout != nil {
		spec["timeout"] = timeout.String()
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": tg.GroupVersion.String(), "kind": "ToolCall", "spec": spec}}
	u.SetName(name)
	u.SetNamespace(w.NS)
	w.G.Expect(w.K8s.Create(context.Background(), u)).To(Succeed())
	stored := &unstructured.Unstructured{}
	stored.SetAPIVersion(tg.GroupVersion.String())
	stored.SetKind("ToolCall")
	w.G.Expect(w.K8s.Get(context.Background(), types.NamespacedName{Namespace: w.NS, Name: name}, stored)).To(Succeed())
	got, _, err := unstructured.NestedString(stored.Object, "spec", "reason")
	w.G.Expect(err).NotTo(HaveOccurred())
	return got
}

// jobEnv is the environment of a Job's first container.
func jobEnv(w *world, jobName string) map[string]string {
	for _, j := range w.Jobs() {
		if j.Name == jobName {
			out := map[string]string{}
			for _, e := range j.Spec.Template.Spec.Containers[0].Env {
				out[e.Name] = e.Value
			}
			return out
		}
	}
	w.T.Fatalf("no Job %s", jobName)
	return nil
}
