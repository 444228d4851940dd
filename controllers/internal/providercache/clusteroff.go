package providercache

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
)

// A namespace-scoped manager (--namespaces with --cluster-approval-providers=false, the chart's
// scope.namespaces) has no cluster-scoped RBAC for ClusterApprovalProviders: it must neither watch
// nor list them, since a read through the cache would start an informer that its Roles refuse.

// WithoutClusterProviders wraps c, the manager's client, so that it never reads a
// ClusterApprovalProvider: a Get finds none (NotFound), a List lists none. Everything else goes to c.
func WithoutClusterProviders(c client.Client) client.Client { return noClusterProviders{c} }

type noClusterProviders struct{ client.Client }

func (c noClusterProviders) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*tg.ClusterApprovalProvider); ok {
		return apierrors.NewNotFound(tg.GroupVersion.WithResource("clusterapprovalproviders").GroupResource(), key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c noClusterProviders) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*tg.ClusterApprovalProviderList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// TurnOffClusterProviders makes the registry refuse ClusterApprovalProviders, saying why: the
// manager was started with --cluster-approval-providers=false. Its cache reader should be one of
// WithoutClusterProviders, so that nothing reads them either.
func (p *Registry) TurnOffClusterProviders() { p.clusterOff = true }

// ClusterProvidersOff reports whether the registry refuses ClusterApprovalProviders.
func (p *Registry) ClusterProvidersOff() bool { return p.clusterOff }

// clusterOffError is why a call accepted with ClusterApprovalProvider k has no client in a manager
// that uses none.
func clusterOffError(k Key) error {
	return readiness.Retryingf("", "%s", ClusterProvidersOffMessage(k.Name))
}

// ClusterProvidersOffMessage says that ClusterApprovalProvider name is not used by this manager,
// naming the setting and the fix.
func ClusterProvidersOffMessage(name string) string {
	return fmt.Sprintf("ClusterApprovalProvider %s is not used: this manager serves only its namespaces, with ClusterApprovalProviders off "+
		"(--cluster-approval-providers=false, the chart's scope.namespaces); name an ApprovalProvider of the Tool's namespace in its spec.providerRef", name)
}
