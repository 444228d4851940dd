// Package apivalidation_test checks, against a real kube-apiserver, what the Toolgate CRDs in
// config/crd/bases accept and refuse: schema types, required fields, CEL rules (durations, the
// timeout/waitingLimit relation, spec immutability), defaults and the status subresource. Every
// refusal is also checked for a readable message: the field path and the rule's message text.
// What kubectl shows of the CRDs is checked too: printer columns and short names (columns_test.go),
// field descriptions and the Tool CRD's size against client-side apply (explain_test.go).
package apivalidation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

var k8s client.Client

var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env, newClient) }

// newClient is the suite's client: with the CRD types' scheme, and without the apiserver's warnings.
func newClient(e *th.Env) error {
	cfg := rest.CopyConfig(e.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, tg.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	var err error
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	return err
}

// newNamespace creates a namespace for one test. envtest runs no namespace controller, so the
// deleted namespace stays Terminating until the apiserver stops; nothing else looks at it.
func newNamespace(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "apivalidation-"}}
	g.Expect(k8s.Create(context.Background(), ns)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

const refundArguments = `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`

// validToolCall is the reference ToolCall every case starts from.
func validToolCall(ns, name string) *tg.ToolCall {
	return &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tg.ToolCallSpec{
			Tool:         "issue_refund",
			Arguments:    runtime.RawExtension{Raw: []byte(refundArguments)},
			WaitingLimit: metav1.Duration{Duration: 45 * time.Minute},
			Timeout:      &metav1.Duration{Duration: 30 * time.Minute},
		},
	}
}

// validToolCallU is validToolCall as unstructured data, so that cases can send values the Go types
// cannot hold (a duration "abc", arguments that are a string).
func validToolCallU(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tg.GroupVersion.String(),
		"kind":       "ToolCall",
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"tool": "issue_refund",
			"arguments": map[string]any{
				"payment_id": "payment_123",
				"amount":     int64(4900),
				"currency":   "GBP",
			},
			"waitingLimit": "45m",
			"timeout":      "30m",
		},
	}}
	return u
}

func validTool(ns, name string) *tg.Tool {
	return &tg.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tg.ToolSpec{
			ToolName: "issue_refund",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "refund", Image: "registry.example/refund:1"}},
				},
			}}},
		},
	}
}

func validToolU(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tg.GroupVersion.String(),
		"kind":       "Tool",
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"toolName": "issue_refund",
			"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never",
				"containers":    []any{map[string]any{"name": "refund", "image": "registry.example/refund:1"}},
			}}}},
		},
	}}
}

// createdU reads a ToolCall back as JSON, as stored.
func createdU(g Gomega, tc *tg.ToolCall) map[string]any {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(tg.GroupVersion.WithKind("ToolCall"))
	g.ExpectWithOffset(1, k8s.Get(context.Background(), client.ObjectKeyFromObject(tc), u)).To(Succeed())
	return u.Object
}

// expectRefused asserts that err is the apiserver refusing the object as Invalid, that one of the
// causes names field, and that the message a person reads names the field and says text.
func expectRefused(g Gomega, err error, field, text string) {
	g.ExpectWithOffset(1, err).To(HaveOccurred(), "the apiserver accepted the object")
	g.ExpectWithOffset(1, apierrors.IsInvalid(err)).To(BeTrue(), "not an Invalid error: %v", err)
	g.ExpectWithOffset(1, err.Error()).To(And(ContainSubstring(field+": "), ContainSubstring(text)))
	status, ok := err.(apierrors.APIStatus)
	g.ExpectWithOffset(1, ok).To(BeTrue(), "not an API status error: %v", err)
	g.ExpectWithOffset(1, status.Status().Details).NotTo(BeNil())
	g.ExpectWithOffset(1, status.Status().Details.Causes).To(ContainElement(And(
		HaveField("Field", field),
		HaveField("Message", ContainSubstring(text)),
	)), "no cause for %s in %v", field, err)
}

// expectRefusedByPolicy asserts that err is the ValidatingAdmissionPolicy policy refusing the object as
// Invalid (422) with a message that ends in text.
func expectRefusedByPolicy(g Gomega, err error, policy, text string) {
	g.ExpectWithOffset(1, err).To(HaveOccurred(), "the apiserver accepted the object")
	g.ExpectWithOffset(1, apierrors.IsInvalid(err)).To(BeTrue(), "not an Invalid error: %v", err)
	status, ok := err.(apierrors.APIStatus)
	g.ExpectWithOffset(1, ok).To(BeTrue(), "not an API status error: %v", err)
	g.ExpectWithOffset(1, status.Status().Code).To(BeEquivalentTo(422))
	g.ExpectWithOffset(1, err.Error()).To(HaveSuffix(fmt.Sprintf(
		"ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", policy, policy, text)))
}

func TestCRDsAreEstablished(t *testing.T) {
	cases := []struct {
		name         string
		statusSubres bool
		columns      []column
	}{
		{
			name:         "toolcalls.toolgate.dev",
			statusSubres: true,
			columns: []column{
				{"Tool", 0}, {"Phase", 0}, {"Ready", 0}, {"Decision", 0}, {"Job", 0}, {"Age", 0}, {"Rule", 1}, {"Requester", 1}, {"Reason", 1},
			},
		},
		{
			name:         "tools.toolgate.dev",
			statusSubres: true,
			columns:      []column{{"Tool Name", 0}, {"Ready", 0}, {"Age", 0}, {"Reason", 1}, {"Rules Ready", 1}, {"Execution Timeout", 1}, {"Provider", 1}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			crd := &apiextensionsv1.CustomResourceDefinition{}
			g.Eventually(func(g Gomega) {
				g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: tc.name}, crd)).To(Succeed())
				g.Expect(crd.Status.Conditions).To(ContainElement(And(
					HaveField("Type", apiextensionsv1.Established),
					HaveField("Status", apiextensionsv1.ConditionTrue),
				)))
				g.Expect(crd.Status.Conditions).To(ContainElement(And(
					HaveField("Type", apiextensionsv1.NamesAccepted),
					HaveField("Status", apiextensionsv1.ConditionTrue),
				)))
			}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

			g.Expect(crd.Spec.Group).To(Equal(tg.GroupVersion.Group))
			g.Expect(crd.Spec.Scope).To(Equal(apiextensionsv1.NamespaceScoped))
			g.Expect(crd.Spec.Names.Categories).To(ConsistOf("toolgate"))
			g.Expect(crd.Spec.Versions).To(HaveLen(1))
			v := crd.Spec.Versions[0]
			g.Expect(v.Name).To(Equal(tg.GroupVersion.Version))
			g.Expect(v.Served).To(BeTrue())
			g.Expect(v.Storage).To(BeTrue())
			if tc.statusSubres {
				g.Expect(v.Subresources).NotTo(BeNil())
				g.Expect(v.Subresources.Status).NotTo(BeNil(), "no status subresource")
			} else if v.Subresources != nil {
				g.Expect(v.Subresources.Status).To(BeNil(), "unexpected status subresource")
			}
			var got []column
			for _, c := range v.AdditionalPrinterColumns {
				got = append(got, column{c.Name, c.Priority})
			}
			g.Expect(got).To(Equal(tc.columns))
		})
	}
}

func TestValidObjectsAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()

	t.Run("toolcalls", func(t *testing.T) {
		cases := []struct {
			name   string
			mutate func(*tg.ToolCall)
		}{
			{"the refund example", func(*tg.ToolCall) {}},
			{"without timeout", func(tc *tg.ToolCall) { tc.Spec.Timeout = nil }},
			{"timeout equal to waitingLimit", func(tc *tg.ToolCall) {
				tc.Spec.Timeout = &metav1.Duration{Duration: tc.Spec.WaitingLimit.Duration}
			}},
			{"timeout of exactly 1s", func(tc *tg.ToolCall) { tc.Spec.Timeout = &metav1.Duration{Duration: time.Second} }},
			{"empty arguments object", func(tc *tg.ToolCall) { tc.Spec.Arguments.Raw = []byte(`{}`) }},
			{"nested arguments", func(tc *tg.ToolCall) {
				tc.Spec.Arguments.Raw = []byte(`{"payment":{"id":"payment_123","lines":[1,2,3]},"notify":true,"note":null}`)
			}},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				g := NewWithT(t)
				want := validToolCall(ns, fmt.Sprintf("valid-%d", i))
				c.mutate(want)
				g.Expect(k8s.Create(ctx, want.DeepCopy())).To(Succeed())

				got := &tg.ToolCall{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(want), got)).To(Succeed())
				g.Expect(got.Spec.Tool).To(Equal(want.Spec.Tool))
				g.Expect(got.Spec.Arguments.Raw).To(MatchJSON(want.Spec.Arguments.Raw))
				g.Expect(got.Spec.WaitingLimit).To(Equal(want.Spec.WaitingLimit))
				g.Expect(got.Spec.Timeout).To(Equal(want.Spec.Timeout))
				g.Expect(got.Status).To(Equal(tg.ToolCallStatus{}))
			})
		}
	})

	t.Run("toolcall written with short durations", func(t *testing.T) {
		g := NewWithT(t)
		u := validToolCallU(ns, "short-durations")
		g.Expect(k8s.Create(ctx, u)).To(Succeed())
		got := &tg.ToolCall{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
		g.Expect(got.Spec.WaitingLimit.Duration).To(Equal(45 * time.Minute))
		g.Expect(got.Spec.Timeout).To(Equal(&metav1.Duration{Duration: 30 * time.Minute}))
		g.Expect(got.Spec.Arguments.Raw).To(MatchJSON(refundArguments))
	})

	t.Run("tools", func(t *testing.T) {
		cases := []struct {
			name   string
			mutate func(*tg.Tool)
			want   time.Duration
		}{
			{"executionTimeout unset is defaulted to 5m", func(*tg.Tool) {}, 5 * time.Minute},
			{"executionTimeout kept when set", func(tool *tg.Tool) {
				tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: 90 * time.Second}
			}, 90 * time.Second},
			{"with an arguments schema", func(tool *tg.Tool) {
				tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(
					`{"type":"object","required":["payment_id"],"properties":{"payment_id":{"type":"string"}}}`)}
			}, 5 * time.Minute},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				g := NewWithT(t)
				tool := validTool(ns, fmt.Sprintf("tool-%d", i))
				c.mutate(tool)
				g.Expect(k8s.Create(ctx, tool)).To(Succeed())
				// Create decodes the apiserver's answer into tool: the default is already there.
				g.Expect(tool.Spec.ExecutionTimeout).To(Equal(&metav1.Duration{Duration: c.want}))

				got := &tg.Tool{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(tool), got)).To(Succeed())
				g.Expect(got.Spec.ExecutionTimeout).To(Equal(&metav1.Duration{Duration: c.want}))
				g.Expect(got.Spec.JobTemplate.Spec.Template.Spec.Containers).To(HaveLen(1))
			})
		}
		g := NewWithT(t)
		g.Expect(tg.DefaultExecutionTimeout).To(Equal("5m"))
	})
}

func TestToolCallSpecIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	const immutable = "spec is immutable: what a human approved is what runs; create a new ToolCall instead"

	// The CRD's rule compares spec.arguments (an object without a schema of its own) key by key over
	// the keys both sides have, so a top-level key replaced by another passes it, and it lists the
	// members of spec it compares, which spec.reason is not among. The ValidatingAdmissionPolicy
	// config/admission/toolcall_spec_immutable.yaml compares the whole spec and refuses both. Its
	// refusal names the changed member in the message (the apiserver gives a policy's refusal no
	// field path).
	cases := []struct {
		name   string
		mutate func(*tg.ToolCall)
		policy string // "": the CRD's rule refuses; else the admission policy does, naming this member
	}{
		{"arguments: a value changed", func(tc *tg.ToolCall) {
			tc.Spec.Arguments.Raw = []byte(`{"payment_id":"payment_123","amount":490000,"currency":"GBP"}`)
		}, ""},
		{"arguments: a key added", func(tc *tg.ToolCall) {
			tc.Spec.Arguments.Raw = []byte(`{"payment_id":"payment_123","amount":4900,"currency":"GBP","reason":"x"}`)
		}, ""},
		{"arguments: a key removed", func(tc *tg.ToolCall) {
			tc.Spec.Arguments.Raw = []byte(`{"payment_id":"payment_123","amount":4900}`)
		}, ""},
		{"arguments: a key replaced by another", func(tc *tg.ToolCall) {
			tc.Spec.Arguments.Raw = []byte(`{"payment_id":"payment_123","amount":4900,"refund_to":"acct_999"}`)
		}, "spec.arguments"},
		{"arguments: a nested value changed", func(tc *tg.ToolCall) {
			tc.Spec.Arguments.Raw = []byte(`{"payment_id":"payment_123","amount":4900,"currency":{"code":"GBP"}}`)
		}, ""},
		{"arguments: emptied", func(tc *tg.ToolCall) { tc.Spec.Arguments.Raw = []byte(`{}`) }, ""},
		{"tool", func(tc *tg.ToolCall) { tc.Spec.Tool = "delete_customer" }, ""},
		{"waitingLimit", func(tc *tg.ToolCall) { tc.Spec.WaitingLimit = metav1.Duration{Duration: 2 * time.Hour} }, ""},
		{"timeout changed", func(tc *tg.ToolCall) { tc.Spec.Timeout = &metav1.Duration{Duration: 10 * time.Minute} }, ""},
		{"timeout removed", func(tc *tg.ToolCall) { tc.Spec.Timeout = nil }, ""},
		{"reason added", func(tc *tg.ToolCall) { tc.Spec.Reason = "the customer was charged twice" }, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			created := validToolCall(ns, fmt.Sprintf("immutable-%d", i))
			g.Expect(k8s.Create(ctx, created)).To(Succeed())

			tc := &tg.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), tc)).To(Succeed())
			c.mutate(tc)
			err := k8s.Update(ctx, tc)
			if c.policy != "" {
				expectRefusedByPolicy(g, err, "toolcall-spec-immutable", immutable+" (changed: "+c.policy+")")
			} else {
				expectRefused(g, err, "spec", immutable)
			}

			got := &tg.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), got)).To(Succeed())
			g.Expect(got.Spec.Arguments.Raw).To(MatchJSON(refundArguments))
			g.Expect(got.Spec.Tool).To(Equal("issue_refund"))
			g.Expect(got.Spec.WaitingLimit.Duration).To(Equal(45 * time.Minute))
			g.Expect(got.Spec.Timeout).To(Equal(&metav1.Duration{Duration: 30 * time.Minute}))
			g.Expect(got.Spec.Reason).To(BeEmpty())
			g.Expect(got.Generation).To(Equal(created.Generation))
		})
	}

	t.Run("a merge patch of spec is refused too", func(t *testing.T) {
		g := NewWithT(t)
		tc := validToolCall(ns, "immutable-patch")
		g.Expect(k8s.Create(ctx, tc)).To(Succeed())
		patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"arguments":{"amount":1}}}`))
		expectRefused(g, k8s.Patch(ctx, tc, patch), "spec", immutable)
	})

	t.Run("durations are compared by value", func(t *testing.T) {
		cases := []struct {
			name                  string
			waitingLimit, timeout any // the new spelling; nil removes timeout
			refused               []string
		}{
			{name: "same durations, other spelling", waitingLimit: "2700s", timeout: "0.5h"},
			{name: "same durations, Go spelling", waitingLimit: "45m0s", timeout: "30m0s"},
			{name: "same durations, hours and minutes", waitingLimit: "0h45m", timeout: "29m60s"},
			{name: "waitingLimit one second longer", waitingLimit: "45m1s", timeout: "30m",
				refused: []string{"spec", immutable}},
			{name: "timeout removed", waitingLimit: "45m", timeout: nil,
				refused: []string{"spec", immutable}},
			{name: "waitingLimit not a duration", waitingLimit: "abc", timeout: "30m",
				refused: []string{"spec.waitingLimit", "waitingLimit must be a positive duration"}},
			{name: "timeout not a duration", waitingLimit: "45m", timeout: "soon",
				refused: []string{"spec.timeout", "timeout must be a duration of at least 1s"}},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				g := NewWithT(t)
				created := validToolCall(ns, fmt.Sprintf("spelling-%d", i))
				g.Expect(k8s.Create(ctx, created)).To(Succeed())

				u := validToolCallU(ns, created.Name)
				u.SetResourceVersion(created.ResourceVersion)
				// The requester the admission policy recorded is part of the spec: sent back as read.
				requester, _, _ := unstructured.NestedFieldCopy(createdU(g, created), "spec", "requester")
				g.Expect(requester).NotTo(BeNil())
				g.Expect(unstructured.SetNestedField(u.Object, requester, "spec", "requester")).To(Succeed())
				u.SetLabels(map[string]string{"respelled": "yes"})
				g.Expect(unstructured.SetNestedField(u.Object, c.waitingLimit, "spec", "waitingLimit")).To(Succeed())
				if c.timeout == nil {
					unstructured.RemoveNestedField(u.Object, "spec", "timeout")
				} else {
					g.Expect(unstructured.SetNestedField(u.Object, c.timeout, "spec", "timeout")).To(Succeed())
				}
				err := k8s.Update(ctx, u)
				if c.refused != nil {
					expectRefused(g, err, c.refused[0], c.refused[1])
					return
				}
				g.Expect(err).NotTo(HaveOccurred())
				got := &tg.ToolCall{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), got)).To(Succeed())
				g.Expect(got.Labels).To(HaveKeyWithValue("respelled", "yes"))
				g.Expect(got.Spec.WaitingLimit.Duration).To(Equal(45 * time.Minute))
				g.Expect(got.Spec.Timeout).To(Equal(&metav1.Duration{Duration: 30 * time.Minute}))
			})
		}
	})

	t.Run("metadata can still change", func(t *testing.T) {
		cases := []struct {
			name   string
			create func(ns, name string) client.Object
		}{
			{"written by a typed client", func(ns, name string) client.Object { return validToolCall(ns, name) }},
			{"written with short durations", func(ns, name string) client.Object { return validToolCallU(ns, name) }},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				g := NewWithT(t)
				created := c.create(ns, fmt.Sprintf("labels-%d", i))
				g.Expect(k8s.Create(ctx, created)).To(Succeed())

				tc := &tg.ToolCall{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), tc)).To(Succeed())
				base := tc.DeepCopy()
				tc.Labels = map[string]string{"team": "payments"}
				tc.Annotations = map[string]string{"example.com/ticket": "T-1"}
				g.Expect(k8s.Patch(ctx, tc, client.MergeFrom(base))).To(Succeed())

				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), tc)).To(Succeed())
				tc.Labels["stage"] = "review"
				g.Expect(k8s.Update(ctx, tc)).To(Succeed())

				got := &tg.ToolCall{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), got)).To(Succeed())
				g.Expect(got.Labels).To(Equal(map[string]string{"team": "payments", "stage": "review"}))
				g.Expect(got.Annotations).To(HaveKeyWithValue("example.com/ticket", "T-1"))
				g.Expect(got.Spec.Arguments.Raw).To(MatchJSON(refundArguments))
			})
		}
	})
}

func TestBadDurationsAreRefused(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	const (
		waitingLimitMsg = "waitingLimit must be a positive duration such as 90s, 30m or 1h30m"
		timeoutMsg      = "timeout must be a duration of at least 1s such as 90s, 30m or 1h30m"
		executionMsg    = "executionTimeout must be a positive duration such as 90s, 5m or 1h30m"
		finishedTTLMsg  = "finishedCallTTL must be 0s (keep finished calls forever) or a duration of at least 1m such as 24h or 720h"
	)
	cases := []struct {
		name  string
		obj   func(name string) *unstructured.Unstructured
		field string // path inside spec
		value any
		text  string
	}{
		{"waitingLimit not a duration", toolCallU(ns), "waitingLimit", "abc", waitingLimitMsg},
		{"waitingLimit negative", toolCallU(ns), "waitingLimit", "-5m", waitingLimitMsg},
		{"waitingLimit zero", toolCallU(ns), "waitingLimit", "0s", waitingLimitMsg},
		{"waitingLimit without a unit", toolCallU(ns), "waitingLimit", "30", waitingLimitMsg},
		{"waitingLimit empty", toolCallU(ns), "waitingLimit", "", waitingLimitMsg},
		{"waitingLimit too large for a duration", toolCallU(ns), "waitingLimit", "99999999999999h", waitingLimitMsg},
		{"waitingLimit with a space", toolCallU(ns), "waitingLimit", "30 m", waitingLimitMsg},
		{"waitingLimit in days", toolCallU(ns), "waitingLimit", "1d", waitingLimitMsg},
		{"timeout not a duration", toolCallU(ns), "timeout", "soon", timeoutMsg},
		{"timeout below 1s", toolCallU(ns), "timeout", "500ms", timeoutMsg},
		{"timeout zero", toolCallU(ns), "timeout", "0s", timeoutMsg},
		{"executionTimeout not a duration", toolU(ns), "executionTimeout", "forever", executionMsg},
		{"executionTimeout zero", toolU(ns), "executionTimeout", "0s", executionMsg},
		{"executionTimeout negative", toolU(ns), "executionTimeout", "-1h", executionMsg},
		{"finishedCallTTL under a minute", toolU(ns), "finishedCallTTL", "59s", finishedTTLMsg},
		{"finishedCallTTL negative", toolU(ns), "finishedCallTTL", "-1h", finishedTTLMsg},
		{"finishedCallTTL not a duration", toolU(ns), "finishedCallTTL", "forever", finishedTTLMsg},
		{"finishedCallTTL in days", toolU(ns), "finishedCallTTL", "7d", finishedTTLMsg},
		{"finishedCallTTL without a unit", toolU(ns), "finishedCallTTL", "0", finishedTTLMsg},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			u := c.obj(fmt.Sprintf("duration-%d", i))
			g.Expect(unstructured.SetNestedField(u.Object, c.value, "spec", c.field)).To(Succeed())
			expectRefused(g, k8s.Create(ctx, u), "spec."+c.field, c.text)
		})
	}

	t.Run("durations of a wrong JSON type", func(t *testing.T) {
		cases := []struct {
			field string
			value any
		}{
			{"waitingLimit", int64(1800)},
			{"timeout", true},
		}
		for i, c := range cases {
			t.Run(c.field, func(t *testing.T) {
				g := NewWithT(t)
				u := validToolCallU(ns, fmt.Sprintf("duration-type-%d", i))
				g.Expect(unstructured.SetNestedField(u.Object, c.value, "spec", c.field)).To(Succeed())
				expectRefused(g, k8s.Create(ctx, u), "spec."+c.field, "must be of type string")
			})
		}
	})
}

// A Tool's spec.finishedCallTTL: 0s (keep forever) or at least a minute, kept as written.
func TestFinishedCallTTLIsAccepted(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	for i, ttl := range []string{"0s", "1m", "720h", "1h30m"} {
		t.Run(ttl, func(t *testing.T) {
			g := NewWithT(t)
			u := validToolU(ns, fmt.Sprintf("ttl-%d", i))
			g.Expect(unstructured.SetNestedField(u.Object, ttl, "spec", "finishedCallTTL")).To(Succeed())
			g.Expect(k8s.Create(ctx, u)).To(Succeed())
			got := &tg.Tool{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
			want, err := time.ParseDuration(ttl)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Spec.FinishedCallTTL).To(Equal(&metav1.Duration{Duration: want}))
		})
	}
}

func toolCallU(ns string) func(string) *unstructured.Unstructured {
	return func(name string) *unstructured.Unstructured { return validToolCallU(ns, name) }
}

func toolU(ns string) func(string) *unstructured.Unstructured {
	return func(name string) *unstructured.Unstructured { return validToolU(ns, name) }
}

func TestTimeoutMustNotExceedWaitingLimit(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	const text = "timeout must not exceed waitingLimit: the approval has to arrive while the caller is still waiting"
	cases := []struct {
		timeout, waitingLimit string
	}{
		{"1h", "30m"},
		{"30m1s", "30m"},
		{"2h", "1h59m59s"},
	}
	for i, c := range cases {
		t.Run(c.timeout+" over "+c.waitingLimit, func(t *testing.T) {
			g := NewWithT(t)
			u := validToolCallU(ns, fmt.Sprintf("over-%d", i))
			g.Expect(unstructured.SetNestedField(u.Object, c.timeout, "spec", "timeout")).To(Succeed())
			g.Expect(unstructured.SetNestedField(u.Object, c.waitingLimit, "spec", "waitingLimit")).To(Succeed())
			expectRefused(g, k8s.Create(ctx, u), "spec", text)
		})
	}

	t.Run("typed client", func(t *testing.T) {
		g := NewWithT(t)
		tc := validToolCall(ns, "over-typed")
		tc.Spec.Timeout = &metav1.Duration{Duration: time.Hour}
		tc.Spec.WaitingLimit = metav1.Duration{Duration: 30 * time.Minute}
		expectRefused(g, k8s.Create(ctx, tc), "spec", text)
	})
}

func TestArgumentsMustBeAnObject(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		value any
		typ   string
	}{
		{"a JSON string", `{"payment_id":"payment_123"}`, "string"},
		{"a number", int64(4900), "integer"},
		{"a fractional number", 49.5, "number"},
		{"an array", []any{"payment_123", int64(4900)}, "array"},
		{"a boolean", true, "boolean"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			u := validToolCallU(ns, fmt.Sprintf("arguments-%d", i))
			g.Expect(unstructured.SetNestedField(u.Object, c.value, "spec", "arguments")).To(Succeed())
			expectRefused(g, k8s.Create(ctx, u), "spec.arguments",
				fmt.Sprintf("spec.arguments in body must be of type object: %q", c.typ))
		})
	}

	t.Run("null", func(t *testing.T) {
		g := NewWithT(t)
		u := validToolCallU(ns, "arguments-null")
		g.Expect(unstructured.SetNestedField(u.Object, nil, "spec", "arguments")).To(Succeed())
		expectRefused(g, k8s.Create(ctx, u), "spec.arguments", "Required value")
	})
}

func TestRequiredFields(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		obj   func(string) *unstructured.Unstructured
		path  []string
		field string
		text  string
	}{
		{"toolcall without tool", toolCallU(ns), []string{"spec", "tool"}, "spec.tool", "Required value"},
		{"toolcall without arguments", toolCallU(ns), []string{"spec", "arguments"}, "spec.arguments", "Required value"},
		{"toolcall without waitingLimit", toolCallU(ns), []string{"spec", "waitingLimit"}, "spec.waitingLimit", "Required value"},
		{"toolcall without spec", toolCallU(ns), []string{"spec"}, "spec", "Required value"},
		{"tool without toolName", toolU(ns), []string{"spec", "toolName"}, "spec.toolName", "Required value"},
		{"tool without jobTemplate", toolU(ns), []string{"spec", "jobTemplate"}, "spec.jobTemplate", "Required value"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			u := c.obj(fmt.Sprintf("required-%d", i))
			unstructured.RemoveNestedField(u.Object, c.path...)
			expectRefused(g, k8s.Create(ctx, u), c.field, c.text)
		})
	}

	t.Run("empty tool", func(t *testing.T) {
		g := NewWithT(t)
		u := validToolCallU(ns, "required-empty-tool")
		g.Expect(unstructured.SetNestedField(u.Object, "", "spec", "tool")).To(Succeed())
		expectRefused(g, k8s.Create(ctx, u), "spec.tool", "should be at least 1 chars long")
	})
}

func TestStatusIsNotWrittenThroughTheMainResource(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		write func(g Gomega, tc *tg.ToolCall)
	}{
		{"update", func(g Gomega, tc *tg.ToolCall) {
			tc.Status = tg.ToolCallStatus{Phase: tg.PhaseSucceeded, JobName: "refund-job", Reason: tg.ReasonJobSucceeded}
			tc.Labels = map[string]string{"written": "yes"}
			g.Expect(k8s.Update(ctx, tc)).To(Succeed())
		}},
		{"merge patch", func(g Gomega, tc *tg.ToolCall) {
			base := tc.DeepCopy()
			tc.Status = tg.ToolCallStatus{Phase: tg.PhaseSucceeded, JobName: "refund-job", Reason: tg.ReasonJobSucceeded}
			tc.Labels = map[string]string{"written": "yes"}
			g.Expect(k8s.Patch(ctx, tc, client.MergeFrom(base))).To(Succeed())
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			created := validToolCall(ns, fmt.Sprintf("status-%d", i))
			g.Expect(k8s.Create(ctx, created)).To(Succeed())

			tc := &tg.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), tc)).To(Succeed())
			c.write(g, tc)
			// The apiserver's answer, decoded into tc, already shows status untouched.
			g.Expect(tc.Status).To(Equal(tg.ToolCallStatus{}))

			got := &tg.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), got)).To(Succeed())
			g.Expect(got.Labels).To(HaveKeyWithValue("written", "yes"), "the rest of the write was applied")
			g.Expect(got.Status).To(Equal(tg.ToolCallStatus{}))
		})
	}

	t.Run("the status subresource does write it", func(t *testing.T) {
		g := NewWithT(t)
		created := validToolCall(ns, "status-subresource")
		g.Expect(k8s.Create(ctx, created)).To(Succeed())
		tc := &tg.ToolCall{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), tc)).To(Succeed())
		tc.Status.Phase = tg.PhasePending
		g.Expect(k8s.Status().Update(ctx, tc)).To(Succeed())
		got := &tg.ToolCall{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(tg.PhasePending))

		got.Status.Phase = "Finished"
		expectRefused(g, k8s.Status().Update(ctx, got), "status.phase", "Unsupported value")
	})
}

func TestApprovalRulesAreValidated(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	rule := func(name, expr, action string) map[string]any {
		return map[string]any{"name": name, "expression": expr, "action": action}
	}
	withRules := func(name string, rules ...any) *unstructured.Unstructured {
		u := validToolU(ns, name)
		u.Object["spec"].(map[string]any)["approval"] = map[string]any{"rules": rules}
		return u
	}

	t.Run("ordered rules with every action are accepted, hints too", func(t *testing.T) {
		g := NewWithT(t)
		u := withRules("rules-valid",
			rule("never-prod", `arguments.name.startsWith("prod-")`, "Deny"),
			rule("small-refunds", `arguments.amount < 5000`, "Approve"),
			rule("everything-else", `true`, "Require"))
		g.Expect(unstructured.SetNestedField(u.Object, true, "spec", "mcpAnnotations", "destructiveHint")).To(Succeed())
		g.Expect(k8s.Create(ctx, u)).To(Succeed())
		got := &tg.Tool{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
		g.Expect(got.Spec.Approval.Rules).To(HaveLen(3))
		g.Expect(got.Spec.Approval.Rules[1]).To(Equal(tg.ApprovalRule{Name: "small-refunds", Expression: `arguments.amount < 5000`, Action: tg.ActionApprove}))
		g.Expect(got.Spec.MCPAnnotations.DestructiveHint).To(Equal(ptr.To(true)))
	})

	cases := []struct {
		name  string
		rules []any
		field string
		text  string
	}{
		{"unknown action", []any{rule("a", "true", "Allow")}, "spec.approval.rules[0].action", `Unsupported value: "Allow"`},
		{"name not a DNS label", []any{rule("Small Refunds", "true", "Approve")}, "spec.approval.rules[0].name", "should match"},
		{"empty expression", []any{rule("a", "", "Approve")}, "spec.approval.rules[0].expression", "should be at least 1 chars long"},
		{"duplicate names", []any{rule("a", "true", "Approve"), rule("a", "false", "Deny")}, "spec.approval.rules[1]", "Duplicate value"},
		{"no action", []any{map[string]any{"name": "a", "expression": "true"}}, "spec.approval.rules[0].action", "Required value"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectRefused(NewWithT(t), k8s.Create(ctx, withRules(fmt.Sprintf("rules-%d", i), c.rules...)), c.field, c.text)
		})
	}

	t.Run("at most 32 rules", func(t *testing.T) {
		var rules []any
		for i := range tg.MaxApprovalRules + 1 {
			rules = append(rules, rule(fmt.Sprintf("r%d", i), "false", "Deny"))
		}
		expectRefused(NewWithT(t), k8s.Create(ctx, withRules("rules-too-many", rules...)), "spec.approval.rules", "must have at most 32 items")
	})
}
