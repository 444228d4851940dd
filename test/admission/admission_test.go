// Package admission_test checks, on a real kube-apiserver (envtest, which enforces RBAC and runs
// ValidatingAdmissionPolicy and MutatingAdmissionPolicy), the admission policies of config/admission
// as users apply them: who may call which tool (RBAC verb "call" on tools, resourceName the toolName),
// who asked (spec.requester, recorded at creation, unforgeable and immutable), and the Tool naming
// convention that keeps RBAC grants and Tool objects easy to match up. Callers are impersonated.
package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/test/testenv"
	th "toolgate.dev/toolgate/test/testharness"
)

var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }

// caller is one impersonated identity.
type caller struct {
	user   string
	uid    string
	groups []string
	client client.Client
}

func newCaller(g Gomega, user, uid string, groups ...string) *caller {
	return newCallerWithExtra(g, user, uid, nil, groups...)
}

// newPodCaller is a ServiceAccount as its Pod's token makes it: with the extras the apiserver adds for
// a token bound to a Pod, which impersonating the ServiceAccount alone does not give.
func newPodCaller(g Gomega, user, pod string, groups ...string) *caller {
	return newCallerWithExtra(g, user, "", map[string][]string{
		"authentication.kubernetes.io/pod-name": {pod},
		"authentication.kubernetes.io/pod-uid":  {"5d0b4f7e-2c1a-4e3b-9f8d-7a6c5b4e3d2c"},
	}, groups...)
}

func newCallerWithExtra(g Gomega, user, uid string, extra map[string][]string, groups ...string) *caller {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, UID: uid, Groups: groups, Extra: extra}
	c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return &caller{user: user, uid: uid, groups: groups, client: c}
}

// agent is a ServiceAccount-like identity in ns bound, as config/rbac's comments show, to the agent
// role and to the shipped grant of issue_refund.
func agent(t *testing.T, ns string) *caller {
	t.Helper()
	g := NewWithT(t)
	a := newCaller(g, "system:serviceaccount:"+ns+":refund-agent", "0f4c2d1e-7a6b-4c3d-9e8f-1a2b3c4d5e6f",
		"system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated")
	for _, role := range shippedAgentRoles(g) {
		bindRole(t, ns, role, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: a.user})
	}
	waitAllowed(t, a, ns, "create", "toolcalls", "")
	waitAllowed(t, a, ns, "call", "tools", "issue_refund")
	return a
}

var installRoles sync.Once

// shippedAgentRoles installs the ClusterRoles of config/rbac/toolcall_agent_role.yaml (once, under
// their names there) and returns their names.
func shippedAgentRoles(g Gomega) []string {
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	var roles []*rbacv1.ClusterRole
	// The agent role, and the sample grant of the sample tool (config/samples).
	for _, file := range []string{"/config/rbac/toolcall_agent_role.yaml", "/config/samples/call_issue_refund_role.yaml"} {
		data, err := os.ReadFile(root + file)
		g.Expect(err).NotTo(HaveOccurred())
		for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
			r := &rbacv1.ClusterRole{}
			g.Expect(yaml.UnmarshalStrict([]byte(doc), r)).To(Succeed())
			roles = append(roles, r)
			names = append(names, r.Name)
		}
	}
	g.Expect(names).To(ConsistOf("toolcall-agent", "toolgate-call-issue-refund"))
	installRoles.Do(func() {
		for _, r := range roles {
			g.Expect(env.Client.Create(context.Background(), r)).To(Succeed())
		}
	})
	return names
}

func bindRole(t *testing.T, ns, role string, s rbacv1.Subject) {
	t.Helper()
	NewWithT(t).Expect(env.Client.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: role + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{s},
	})).To(Succeed())
}

// waitAllowed waits until the RBAC authorizer's informers have the bindings: a refusal seen before
// would prove nothing.
func waitAllowed(t *testing.T, c *caller, ns, verb, resource, name string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: c.user, UID: c.uid, Groups: c.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: tg.GroupVersion.Group, Resource: resource, Name: name},
		}}
		g.Expect(env.Client.Create(context.Background(), sar)).To(Succeed())
		g.Expect(sar.Status.Allowed).To(BeTrue(), "%s never allowed to %s %s %s: %s", c.user, verb, resource, name, sar.Status.Reason)
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-"}}
	NewWithT(t).Expect(env.Client.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

func toolCall(ns, name, tool string) *tg.ToolCall {
	return &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tg.ToolCallSpec{
			Tool:         tool,
			Arguments:    runtime.RawExtension{Raw: []byte(th.RefundArgs)},
			WaitingLimit: metav1.Duration{Duration: 45 * time.Minute},
		},
	}
}

// refusal is the authorization policy's message when user may not call tool in ns.
func refusal(user, tool, ns string) string {
	return fmt.Sprintf(`user %s may not call tool %s in namespace %s: creating this ToolCall needs a Role or ClusterRole bound to the user in namespace %s with the rule {apiGroups: ["toolgate.dev"], resources: ["tools"], verbs: ["call"], resourceNames: [%q]}`,
		user, tool, ns, ns, tool)
}

func expectNotStored(g Gomega, tc *tg.ToolCall) {
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(tc), &tg.ToolCall{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the refused ToolCall %s was stored: %v", tc.Name, err)
}

func TestCallingATool(t *testing.T) {
	ns := newNamespace(t)
	a := agent(t, ns)
	ctx := context.Background()

	t.Run("the granted tool is allowed", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(a.client.Create(ctx, toolCall(ns, "refund", "issue_refund"))).To(Succeed())
	})

	t.Run("another tool is refused with the rule that would allow it", func(t *testing.T) {
		g := NewWithT(t)
		tc := toolCall(ns, "restart", "restart_pod")
		err := a.client.Create(ctx, tc)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring(refusal(a.user, "restart_pod", ns)))
		expectNotStored(g, tc)
	})

	t.Run("the Tool object's name is not the toolName", func(t *testing.T) {
		g := NewWithT(t)
		tc := toolCall(ns, "by-object-name", "issue-refund")
		err := a.client.Create(ctx, tc)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring(refusal(a.user, "issue-refund", ns)))
		expectNotStored(g, tc)
	})

	t.Run("a grant in one namespace calls nothing in another", func(t *testing.T) {
		g := NewWithT(t)
		other := newNamespace(t)
		// The agent role only: it may create ToolCalls there, but call no tool.
		bindRole(t, other, "toolcall-agent", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: a.user})
		waitAllowed(t, a, other, "create", "toolcalls", "")
		tc := toolCall(other, "refund", "issue_refund")
		err := a.client.Create(ctx, tc)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring(refusal(a.user, "issue_refund", other)))
		expectNotStored(g, tc)
	})

	t.Run("a server-side dry run is refused alike", func(t *testing.T) {
		g := NewWithT(t)
		err := a.client.Create(ctx, toolCall(ns, "dry", "restart_pod"), client.DryRunAll)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring(refusal(a.user, "restart_pod", ns)))
	})

	t.Run("a group grant works like a user grant", func(t *testing.T) {
		g := NewWithT(t)
		ops := newCaller(g, "ops-bot", "", "toolgate:ops", "system:authenticated")
		bindRole(t, ns, "toolcall-agent", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "toolgate:ops"})
		bindRole(t, ns, "toolgate-call-issue-refund", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "toolgate:ops"})
		waitAllowed(t, ops, ns, "call", "tools", "issue_refund")
		g.Expect(ops.client.Create(ctx, toolCall(ns, "ops-refund", "issue_refund"))).To(Succeed())
	})
}

func TestRequester(t *testing.T) {
	ns := newNamespace(t)
	a := agent(t, ns)
	ctx := context.Background()
	want := &tg.Requester{Username: a.user, UID: a.uid, Groups: a.groups}

	t.Run("is the authenticated caller", func(t *testing.T) {
		g := NewWithT(t)
		tc := toolCall(ns, "asked", "issue_refund")
		g.Expect(a.client.Create(ctx, tc)).To(Succeed())
		g.Expect(tc.Spec.Requester).To(Equal(want), "the create response")
		got := &tg.ToolCall{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tc), got)).To(Succeed())
		g.Expect(got.Spec.Requester).To(Equal(want), "the stored ToolCall")
	})

	t.Run("a forged requester is overwritten", func(t *testing.T) {
		g := NewWithT(t)
		tc := toolCall(ns, "forged", "issue_refund")
		tc.Spec.Requester = &tg.Requester{Username: "kubernetes-admin", UID: "forged", Groups: []string{"system:masters"}}
		g.Expect(a.client.Create(ctx, tc)).To(Succeed())
		got := &tg.ToolCall{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tc), got)).To(Succeed())
		g.Expect(got.Spec.Requester).To(Equal(want))
	})

	t.Run("a partial forgery is overwritten whole", func(t *testing.T) {
		g := NewWithT(t)
		// Groups only: nothing of it may survive next to the real identity.
		u := toolCallU(ns, "partial", map[string]any{"groups": []any{"system:masters"}})
		g.Expect(a.client.Create(ctx, u)).To(Succeed())
		got := &tg.ToolCall{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "partial"}, got)).To(Succeed())
		g.Expect(got.Spec.Requester).To(Equal(want))
	})

	t.Run("a requester of another type is overwritten", func(t *testing.T) {
		g := NewWithT(t)
		u := toolCallU(ns, "typed", nil)
		g.Expect(unstructured.SetNestedField(u.Object, "kubernetes-admin", "spec", "requester")).To(Succeed())
		g.Expect(a.client.Create(ctx, u)).To(Succeed())
		got := &tg.ToolCall{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "typed"}, got)).To(Succeed())
		g.Expect(got.Spec.Requester).To(Equal(want))
	})

	t.Run("a malformed spec gets the CRD's message, not the policy's", func(t *testing.T) {
		for name, spec := range map[string]any{"missing": nil, "a string": "refund", "a list": []any{"refund"}} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				u := toolCallU(ns, "malformed", nil)
				if spec == nil {
					unstructured.RemoveNestedField(u.Object, "spec")
				} else {
					u.Object["spec"] = spec
				}
				err := a.client.Create(ctx, u)
				g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid from the CRD's schema, got %v", err)
				g.Expect(err.Error()).To(ContainSubstring("spec: "))
				g.Expect(err.Error()).NotTo(ContainSubstring("policy"))
			})
		}
	})

	t.Run("a caller without uid or groups is recorded with empty ones", func(t *testing.T) {
		g := NewWithT(t)
		// The admin of envtest authenticates with a client certificate: no uid.
		tc := toolCall(ns, "by-admin", "issue_refund")
		g.Expect(env.Client.Create(ctx, tc)).To(Succeed())
		g.Expect(tc.Spec.Requester).NotTo(BeNil())
		g.Expect(tc.Spec.Requester.Username).NotTo(BeEmpty())
		g.Expect(tc.Spec.Requester.UID).To(BeEmpty())
		g.Expect(tc.Spec.Requester.Groups).To(ContainElement("system:masters"))
		// Written back as read (what every client that updates metadata does): still the same spec.
		tc.Labels = map[string]string{"audited": "yes"}
		g.Expect(env.Client.Update(ctx, tc)).To(Succeed(), "a metadata update that sends the requester back as read")
	})

	t.Run("survives a GitOps tool applying the same manifest again", func(t *testing.T) {
		g := NewWithT(t)
		// Flux applies server-side; the manifest has no requester. Applying it again, and with a new
		// label, must neither drop the recorded requester nor trip the immutability rule.
		for _, labels := range []map[string]string{nil, nil, {"synced": "yes"}} {
			u := toolCallU(ns, "gitops", nil)
			u.SetLabels(labels)
			g.Expect(env.Client.Patch(ctx, u, client.Apply, client.FieldOwner("kustomize-controller"), client.ForceOwnership)).To(Succeed())
		}
		got := &tg.ToolCall{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gitops"}, got)).To(Succeed())
		g.Expect(got.Labels).To(HaveKeyWithValue("synced", "yes"))
		g.Expect(got.Spec.Requester).NotTo(BeNil())
		g.Expect(got.Spec.Requester.Groups).To(ContainElement("system:masters"), "the admin who applied it")
	})

	t.Run("cannot be changed afterwards", func(t *testing.T) {
		tc := toolCall(ns, "immutable", "issue_refund")
		NewWithT(t).Expect(a.client.Create(ctx, tc)).To(Succeed())
		for name, patch := range map[string]string{
			"username": `{"spec":{"requester":{"username":"kubernetes-admin"}}}`,
			"uid":      `{"spec":{"requester":{"uid":"forged"}}}`,
			"groups":   `{"spec":{"requester":{"groups":["system:masters"]}}}`,
			"removed":  `{"spec":{"requester":null}}`,
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				// As the admin: RBAC allows the patch, the CRD's immutability rule refuses it.
				err := env.Client.Patch(ctx, tc.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
				g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
				g.Expect(err.Error()).To(ContainSubstring("spec is immutable"))
			})
		}
		g := NewWithT(t)
		got := &tg.ToolCall{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tc), got)).To(Succeed())
		g.Expect(got.Spec.Requester).To(Equal(want))
	})

	t.Run("is shown by kubectl get -o wide", func(t *testing.T) {
		g := NewWithT(t)
		tc := toolCall(ns, "wide", "issue_refund")
		g.Expect(a.client.Create(ctx, tc)).To(Succeed())
		// kubectl get asks the apiserver for a Table and prints it; -o wide adds the priority-1 columns.
		cs, err := kubernetes.NewForConfig(env.Config)
		g.Expect(err).NotTo(HaveOccurred())
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/toolgate.dev/v1alpha1/namespaces", ns, "toolcalls", tc.Name).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		table := &metav1.Table{}
		g.Expect(json.Unmarshal(raw, table)).To(Succeed())
		col := -1
		for i, c := range table.ColumnDefinitions {
			if c.Name == "Requester" {
				col = i
				g.Expect(c.Priority).To(BeEquivalentTo(1), "shown by -o wide only")
			}
		}
		g.Expect(col).NotTo(Equal(-1), "no Requester column in %s", raw)
		g.Expect(table.Rows).To(HaveLen(1))
		g.Expect(table.Rows[0].Cells[col]).To(Equal(a.user))
	})
}

// TestPoliciesFailClosed: every policy config/admission ships refuses what it cannot evaluate.
func TestPoliciesFailClosed(t *testing.T) {
	g := NewWithT(t)
	objs, err := testenv.AdmissionObjects()
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetKind() == "ValidatingAdmissionPolicy" || o.GetKind() == "MutatingAdmissionPolicy" {
			policy, _, _ := unstructured.NestedString(o.Object, "spec", "failurePolicy")
			g.Expect(policy).To(Equal("Fail"), "%s %s must fail closed: set spec.failurePolicy: Fail", o.GetKind(), o.GetName())
		}
	}
	g.Expect(kinds).To(Equal(map[string]int{
		"ValidatingAdmissionPolicy": 3, "ValidatingAdmissionPolicyBinding": 3,
		"MutatingAdmissionPolicy": 1, "MutatingAdmissionPolicyBinding": 1,
	}))
}

// TestSpecIsImmutable: an UPDATE may change a ToolCall's metadata, never its spec. The CRD's rule
// compares spec.arguments key by key over the keys both versions have; the policy
// toolcall-spec-immutable compares the whole spec, so what passes the CRD's rule (a top-level key of
// spec.arguments replaced by another) is refused, with the changed member named.
func TestSpecIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	a := agent(t, ns)
	ctx := context.Background()
	const refused = `ValidatingAdmissionPolicy 'toolcall-spec-immutable' with binding 'toolcall-spec-immutable' denied request: ` +
		`spec is immutable: what a human approved is what runs; create a new ToolCall instead (changed: spec.arguments)`

	cases := []struct {
		name      string
		arguments map[string]any // the new spec.arguments; the stored ones are th.RefundArgs
		durations bool           // also respell waitingLimit as a Go client does ("45m" -> "45m0s")
	}{
		{name: "a key replaced by another", arguments: map[string]any{"payment_id": "payment_123", "amount": int64(4900), "refund_to": "acct_999"}},
		{name: "every key replaced", arguments: map[string]any{"a": "payment_123", "b": int64(4900), "c": "GBP"}},
		{name: "a key replaced, durations respelled", durations: true,
			arguments: map[string]any{"payment_id": "payment_123", "amount": int64(4900), "refund_to": "acct_999"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			tc := toolCall(ns, fmt.Sprintf("renamed-%d", i), "issue_refund")
			g.Expect(a.client.Create(ctx, tc)).To(Succeed())
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(tg.GroupVersion.WithKind("ToolCall"))
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tc), u)).To(Succeed())
			g.Expect(unstructured.SetNestedField(u.Object, c.arguments, "spec", "arguments")).To(Succeed())
			if c.durations {
				g.Expect(unstructured.SetNestedField(u.Object, "45m0s", "spec", "waitingLimit")).To(Succeed())
			}
			// As the admin: RBAC allows the update, the CRD's rule lets it by, the policy refuses it.
			err := env.Client.Update(ctx, u)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
			g.Expect(err.Error()).To(HaveSuffix(refused))

			got := &tg.ToolCall{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tc), got)).To(Succeed())
			g.Expect(got.Spec.Arguments.Raw).To(MatchJSON(th.RefundArgs))
			g.Expect(got.Spec.WaitingLimit.Duration).To(Equal(45 * time.Minute))
			g.Expect(got.Generation).To(Equal(tc.Generation))
		})
	}

	// spec.reason is among the members the CRD's own rule compares, so the CRD refuses its change
	// before the policy is asked (on a cluster without config/admission too).
	const crdRefused = `spec: Invalid value: spec is immutable: what a human approved is what runs; create a new ToolCall instead`
	t.Run("spec.reason", func(t *testing.T) {
		for name, c := range map[string]struct{ before, after any }{
			"changed": {before: "the customer asked for a refund", after: "the customer asked for a refund of everything"},
			"added":   {before: nil, after: "approved by finance already"},
			"removed": {before: "the customer asked for a refund", after: nil},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				u := toolCallU(ns, "reason-"+name, nil)
				if c.before != nil {
					g.Expect(unstructured.SetNestedField(u.Object, c.before, "spec", "reason")).To(Succeed())
				}
				g.Expect(a.client.Create(ctx, u)).To(Succeed())
				if c.after != nil {
					g.Expect(unstructured.SetNestedField(u.Object, c.after, "spec", "reason")).To(Succeed())
				} else {
					unstructured.RemoveNestedField(u.Object, "spec", "reason")
				}
				err := env.Client.Update(ctx, u)
				g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
				g.Expect(err.Error()).To(HaveSuffix(crdRefused))

				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(tg.GroupVersion.WithKind("ToolCall"))
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
				reason, found, _ := unstructured.NestedString(got.Object, "spec", "reason")
				if c.before == nil {
					g.Expect(found).To(BeFalse())
				} else {
					g.Expect(reason).To(Equal(c.before))
				}
			})
		}
	})

	t.Run("a renamed key and a changed reason: the CRD's rule refuses first", func(t *testing.T) {
		g := NewWithT(t)
		u := toolCallU(ns, "two-members", nil)
		g.Expect(unstructured.SetNestedField(u.Object, "first reason", "spec", "reason")).To(Succeed())
		g.Expect(a.client.Create(ctx, u)).To(Succeed())
		g.Expect(unstructured.SetNestedField(u.Object, "second reason", "spec", "reason")).To(Succeed())
		g.Expect(unstructured.SetNestedField(u.Object, map[string]any{"refund_to": "acct_999"}, "spec", "arguments")).To(Succeed())
		err := env.Client.Update(ctx, u)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
		g.Expect(err.Error()).To(HaveSuffix(crdRefused))
	})

	t.Run("a metadata update that sends the spec back respelled is allowed", func(t *testing.T) {
		g := NewWithT(t)
		u := toolCallU(ns, "respelled", nil)
		g.Expect(a.client.Create(ctx, u)).To(Succeed())
		g.Expect(unstructured.SetNestedField(u.Object, "2700s", "spec", "waitingLimit")).To(Succeed())
		u.SetLabels(map[string]string{"team": "payments"})
		g.Expect(env.Client.Update(ctx, u)).To(Succeed())
		got := &tg.ToolCall{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
		g.Expect(got.Labels).To(HaveKeyWithValue("team", "payments"))
		g.Expect(got.Spec.WaitingLimit.Duration).To(Equal(45 * time.Minute))
	})
}

func toolCallU(ns, name string, requester map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolCall",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"tool": "issue_refund", "arguments": map[string]any{"amount": int64(1)}, "waitingLimit": "45m",
		},
	}}
	if requester != nil {
		u.Object["spec"].(map[string]any)["requester"] = requester
	}
	return u
}

func TestToolNamingConvention(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	warnings := &collectWarnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = warnings
	admin, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	tool := func(name, toolName string) *tg.Tool {
		return &tg.Tool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: tg.ToolSpec{ToolName: toolName, JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "tool", Image: "busybox:1.36", Command: []string{"true"}}},
			}}}}},
		}
	}

	t.Run("a Tool named after its toolName is written without a warning", func(t *testing.T) {
		g := NewWithT(t)
		warnings.reset()
		g.Expect(admin.Create(ctx, tool("issue-refund", "issue_refund"))).To(Succeed())
		g.Expect(admin.Create(ctx, tool("restart.pod-v2", "Restart.Pod_v2"))).To(Succeed())
		g.Expect(warnings.get()).To(BeEmpty())
	})

	t.Run("a Tool named otherwise is written with a warning that says what the grant names", func(t *testing.T) {
		g := NewWithT(t)
		warnings.reset()
		g.Expect(admin.Create(ctx, tool("refunds", "issue_refund"))).To(Succeed(), "a warning, not a refusal")
		g.Expect(warnings.get()).To(ConsistOf(And(
			ContainSubstring(`Validation failed for ValidatingAdmissionPolicy 'tool-name-convention'`),
			ContainSubstring(`Tool refunds has toolName issue_refund: RBAC grants to call it name the toolName (verb call on tools, resourceNames ["issue_refund"]), not the Tool; name the Tool issue-refund so that the two read the same`))))
	})
}

type collectWarnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *collectWarnings) HandleWarningHeader(code int, agent string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *collectWarnings) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = nil
}

func (w *collectWarnings) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// A ToolCall for a tool the caller may not call is never stored, so neither the controller nor the
// approvals provider ever sees it; the next, allowed one is submitted as usual.
func TestRefusedCallNeverReachesTheProvider(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", "")
	h.Tool("restart-pod", "restart_pod", "")
	a := agent(t, h.NS)
	ctx := context.Background()

	refused := h.NewToolCall("restart", "restart_pod", `{"pod":"web-0"}`, 45*time.Minute, nil)
	err := a.client.Create(ctx, refused)
	h.G.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403 Forbidden, got %v", err)
	allowed := h.NewToolCall("refund", "issue_refund", th.RefundArgs, 45*time.Minute, nil)
	h.G.Expect(a.client.Create(ctx, allowed)).To(Succeed())

	h.G.Eventually(func(g Gomega) {
		got := &tg.ToolCall{}
		g.Expect(h.K8s.Get(ctx, client.ObjectKeyFromObject(allowed), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	requests, err := h.Provider.List("")
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(requests).To(HaveLen(1), "only the allowed call reaches the provider")
	h.G.Expect(requests[0].Tool).To(Equal("issue_refund"))
	expectNotStored(h.G, refused)
}

// The requester reaches the approver (in the approval request's context object, which the provider
// shows next to the arguments) and every event of the ToolCall.
func TestRequesterReachesTheProviderAndTheEvents(t *testing.T) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", "")
	a := agent(t, h.NS)
	ctx := context.Background()

	tc := h.NewToolCall("refund", "issue_refund", th.RefundArgs, 45*time.Minute, nil)
	h.G.Expect(a.client.Create(ctx, tc)).To(Succeed())
	req := h.PendingRequest("refund")
	h.G.Expect(req.Tool).To(Equal("issue_refund"))
	var reqCtx struct {
		Namespace string `json:"namespace"`
		Requester struct {
			Username string   `json:"username"`
			Groups   []string `json:"groups"`
		} `json:"requester"`
	}
	h.G.Expect(json.Unmarshal(req.Context, &reqCtx)).To(Succeed(), "context: %s", req.Context)
	h.G.Expect(reqCtx.Namespace).To(Equal(h.NS))
	h.G.Expect(reqCtx.Requester.Username).To(Equal(a.user))
	h.G.Expect(reqCtx.Requester.Groups).To(Equal(a.groups))

	h.G.Eventually(func(g Gomega) {
		list := &eventsv1.EventList{}
		g.Expect(h.K8s.List(ctx, list, client.InNamespace(h.NS))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name == "refund" {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ContainElement(And(
			HavePrefix("Waiting for a human to approve or deny the call."),
			HaveSuffix(" Requested by "+a.user+"."))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// writersPolicy installs config/admission/writers (the policy that lets only the manager write
// ToolCall status and the acceptance record) for namespace ns alone, with manager as the manager's
// username filled in where config/default's replacements write it (the 4th and 8th pieces between
// single quotes of the first variable), and returns the policy's name.
func writersPolicy(t *testing.T, g Gomega, ns, managerNS, managerName string) string {
	return writersFile(t, g, "toolcall_writers.yaml", "toolcall-writers-"+ns, ns, managerNS, managerName)
}

// writersFile installs one policy file of config/admission/writers as writersPolicy does, under name.
func writersFile(t *testing.T, g Gomega, file, name, ns, managerNS, managerName string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(root + "/config/admission/writers/" + file)
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		obj := &unstructured.Unstructured{}
		g.Expect(yaml.Unmarshal([]byte(doc), &obj.Object)).To(Succeed())
		switch obj.GetKind() {
		case "ValidatingAdmissionPolicy":
			policy, _, _ := unstructured.NestedString(obj.Object, "spec", "failurePolicy")
			g.Expect(policy).To(Equal("Fail"))
			vars, _, _ := unstructured.NestedSlice(obj.Object, "spec", "variables")
			first := vars[0].(map[string]any)
			g.Expect(first["name"]).To(Equal("manager"))
			pieces := strings.Split(first["expression"].(string), "'")
			g.Expect(pieces).To(HaveLen(9))
			pieces[3], pieces[7] = managerNS, managerName
			first["expression"] = strings.Join(pieces, "'")
			g.Expect(unstructured.SetNestedSlice(obj.Object, vars, "spec", "variables")).To(Succeed())
		case "ValidatingAdmissionPolicyBinding":
			g.Expect(unstructured.SetNestedField(obj.Object, name, "spec", "policyName")).To(Succeed())
			g.Expect(unstructured.SetNestedField(obj.Object, map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}},
				"spec", "matchResources", "namespaceSelector")).To(Succeed())
		}
		obj.SetName(name)
		g.Expect(env.Client.Create(ctx, obj)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	return name
}

// TestOnlyTheManagerWritesStatusAndTheRecord: with config/admission/writers installed, a user who
// holds every verb on toolcalls and toolcalls/status can neither write a ToolCall's status (where a
// decision would be) nor add, change or remove the acceptance annotations and Toolgate's finalizer;
// the manager's ServiceAccount can, and other metadata stays writable by its owners.
func TestOnlyTheManagerWritesStatusAndTheRecord(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	policy := writersPolicy(t, g, ns, ns, "toolgate-manager")
	writer := newCaller(g, "system:serviceaccount:"+ns+":gitops", "", "system:serviceaccounts", "system:authenticated")
	manager := newPodCaller(g, "system:serviceaccount:"+ns+":toolgate-manager", "toolgate-controller-manager-7d9f8-abcde", "system:serviceaccounts", "system:authenticated")
	// Whoever may impersonate ServiceAccounts can act as the manager's, but without its Pod's token.
	impostor := newCaller(g, manager.user, "", "system:serviceaccounts", "system:authenticated")
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "toolcall-everything"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{tg.GroupVersion.Group}, Resources: []string{"toolcalls", "toolcalls/status"}, Verbs: []string{"*"}},
		{APIGroups: []string{tg.GroupVersion.Group}, Resources: []string{"tools"}, Verbs: []string{"call"}},
	}}
	g.Expect(env.Client.Create(ctx, role)).To(Succeed())
	for _, c := range []*caller{writer, manager} {
		g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "toolcall-everything-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: c.user}},
		})).To(Succeed())
		waitAllowed(t, c, ns, "update", "toolcalls", "")
		waitAllowed(t, c, ns, "call", "tools", "issue_refund")
	}
	denied := func(user string) string {
		return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: user %s may not", policy, policy, user)
	}

	tc := toolCall(ns, "refund", "issue_refund")
	g.Expect(writer.client.Create(ctx, tc)).To(Succeed())
	approve := func(c *caller) error {
		got := &tg.ToolCall{}
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(tc), got); err != nil {
			return err
		}
		got.Status.Phase = tg.PhasePending
		got.Status.Decision = &tg.Decision{Status: "approved", Source: tg.DecisionSourcePolicy, Rule: "anything"}
		return c.client.Status().Update(ctx, got)
	}
	// The policy is in force once the writer's status write is refused.
	g.Eventually(func() error { return approve(writer) }).WithTimeout(30 * time.Second).Should(
		MatchError(ContainSubstring(denied(writer.user) + " write the status of ToolCalls: only the Toolgate manager (" + manager.user + ", with its Pod's token)")))
	g.Expect(approve(impostor)).To(MatchError(ContainSubstring(denied(impostor.user) + " write the status of ToolCalls")))
	g.Expect(approve(manager)).To(Succeed())

	// The acceptance record: neither at creation nor by an update, nor its removal.
	forged := toolCall(ns, "forged", "issue_refund")
	forged.Annotations = map[string]string{tg.AnnotationApprovalRule: "anything", "example.com/note": "kept"}
	g.Expect(writer.client.Create(ctx, forged)).To(MatchError(And(ContainSubstring(denied(writer.user)),
		ContainSubstring("acceptance record ("+tg.AnnotationApprovalRule+")"), ContainSubstring("create ToolCalls without toolgate.dev/ finalizers or annotations"))))
	forged.Annotations = nil
	forged.Finalizers = []string{tg.Finalizer}
	g.Expect(writer.client.Create(ctx, forged)).To(MatchError(ContainSubstring("acceptance record (finalizer " + tg.Finalizer + ")")))

	update := func(c *caller, change func(*tg.ToolCall)) error {
		got := &tg.ToolCall{}
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(tc), got); err != nil {
			return err
		}
		change(got)
		return c.client.Update(ctx, got)
	}
	g.Expect(update(writer, func(o *tg.ToolCall) {
		o.Annotations = map[string]string{tg.AnnotationProvider: "ClusterApprovalProvider/default", tg.AnnotationExecutionTimeout: "1h"}
	})).To(MatchError(ContainSubstring("acceptance record (" + tg.AnnotationExecutionTimeout + ", " + tg.AnnotationProvider + ")")))
	g.Expect(update(manager, func(o *tg.ToolCall) {
		o.Annotations = map[string]string{tg.AnnotationExecutionTimeout: "5m0s"}
		o.Finalizers = []string{tg.Finalizer}
	})).To(Succeed())
	g.Expect(update(writer, func(o *tg.ToolCall) { o.Annotations[tg.AnnotationExecutionTimeout] = "1h" })).To(MatchError(ContainSubstring("acceptance record")))
	g.Expect(update(writer, func(o *tg.ToolCall) { o.Finalizers = nil })).To(MatchError(ContainSubstring("finalizer " + tg.Finalizer)))
	g.Expect(update(impostor, func(o *tg.ToolCall) { o.Finalizers = nil })).To(MatchError(ContainSubstring("finalizer " + tg.Finalizer)))
	g.Expect(update(writer, func(o *tg.ToolCall) { o.Annotations["example.com/note"] = "an owner's own annotation" })).To(Succeed())
	g.Expect(update(manager, func(o *tg.ToolCall) { o.Finalizers = nil })).To(Succeed())
}
