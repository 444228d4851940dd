package providercache

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
)

// A registry without ClusterApprovalProviders reads none, even one that exists, and resolves a Tool
// without spec.providerRef past the ClusterApprovalProvider named default; a call accepted with one
// gets no client, and the reason names the setting. ApprovalProviders are read as before.
func TestWithoutClusterProviders(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	if err := tg.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: tg.DefaultProviderName}},
		&tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "billing"}},
	).Build()

	// With them, the ClusterApprovalProvider named default serves a Tool of a namespace without a default.
	tool := &tg.Tool{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "refund"}}
	on := New(c, c, nil, "toolgate-system", nil)
	if k, err := on.Resolve(ctx, tool); err != nil || k.Kind != tg.KindClusterApprovalProvider {
		t.Fatalf("with ClusterApprovalProviders, Resolve = %v, %v; want the ClusterApprovalProvider named default", k, err)
	}

	hidden := WithoutClusterProviders(c)
	err := hidden.Get(ctx, types.NamespacedName{Name: tg.DefaultProviderName}, &tg.ClusterApprovalProvider{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Get of a ClusterApprovalProvider = %v, want NotFound", err)
	}
	list := &tg.ClusterApprovalProviderList{}
	if err := hidden.List(ctx, list); err != nil || len(list.Items) != 0 {
		t.Errorf("List of ClusterApprovalProviders = %d items, %v; want none", len(list.Items), err)
	}
	if err := hidden.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "billing"}, &tg.ApprovalProvider{}); err != nil {
		t.Errorf("Get of an ApprovalProvider = %v, want it read", err)
	}

	off := New(hidden, hidden, nil, "toolgate-system", nil)
	off.TurnOffClusterProviders()
	if !off.ClusterProvidersOff() {
		t.Fatal("ClusterProvidersOff() = false after TurnOffClusterProviders")
	}
	if k, err := off.Resolve(ctx, tool); err != nil || k != Flags {
		t.Errorf("without ClusterApprovalProviders, Resolve = %v, %v; want the manager's flags", k, err)
	}
	_, _, err = off.Client(ctx, Key{Kind: tg.KindClusterApprovalProvider, Name: tg.DefaultProviderName}, true, "")
	u, ok := readiness.ErrorOf(err)
	if !ok {
		t.Fatalf("Client of a ClusterApprovalProvider = %v, want a *readiness.Error", err)
	}
	for _, want := range []string{"ClusterApprovalProvider default is not used", "--cluster-approval-providers=false", "scope.namespaces"} {
		if !strings.Contains(u.Message, want) {
			t.Errorf("the reason %q does not say %q", u.Message, want)
		}
	}
}
