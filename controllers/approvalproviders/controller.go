// Package approvalproviders is the controller of ApprovalProviders and ClusterApprovalProviders: it
// checks each one's credential and reachability, provisions its AAP instance and registers its
// webhook receiver.
package approvalproviders

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/provider"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=approvalproviders;clusterapprovalproviders,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvalproviders/status;clusterapprovalproviders/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler checks the ApprovalProviders (or the ClusterApprovalProviders, by kind): it
// builds each one's client from the object and its Secret, reads the credential again (a rotated
// Secret takes effect here, or at the provider's first 401), and probes the provider with an
// authenticated read of a request that cannot exist, which a provider that accepts the credential
// answers 404. The Ready condition says what it found, for the object's generation, and kstatus's
// Reconciling and Stalled what that means (Readiness); a change of Ready is reported as an event.
type Reconciler struct {
	client.Client
	// Recorder emits the event of a change of Ready.
	Recorder events.EventRecorder
	// Clock times the deletion of a provider object in use.
	Clock clock.PassiveClock
	// Kind is the kind this reconciler serves: tg.KindApprovalProvider or tg.KindClusterApprovalProvider.
	Kind string
	// Providers is the registry of provider clients the manager shares.
	Providers *providercache.Registry
}

const (
	// probeTimeout bounds one probe, its retries included.
	probeTimeout = 10 * time.Second
	// reprobeReady and reprobeNotReady are how soon a provider is probed again.
	reprobeReady    = 5 * time.Minute
	reprobeNotReady = 10 * time.Second
)

// Reconcile: get, handle deletion, then the steps below in order, and one status write at the end,
// skipped when nothing changed.
//
//	step (file)                                              what it sets
//	deleted: retire (provisioning.go)                        an object with an instance of its own
//	                                                         deletes it; one with an issued credential
//	                                                         waits until its calls ended; then it goes
//	spec.provisioning: provision (provisioning.go)           the finalizer, the instance and its
//	                                                         credential Secret; a replacement once two
//	                                                         thirds of an expiring credential passed;
//	                                                         Ready False when none could be had
//	spec.provisioning: retireReplaced (provisioning.go)      replaced instances no call uses deleted
//	otherwise: the in-use finalizer                          -
//	check (controller.go)                                    Ready (with Reconciling and Stalled): the
//	                                                         client built and the provider probed with
//	                                                         the credential
//	registerDelivery (delivery.go)                           Delivery: the receiver registered with
//	                                                         the instance (spec.delivery), or removed
//	the status write (readiness.Writer)                      Ready from the first step's *readiness.Error,
//	                                                         or Reachable; one patch against the
//	                                                         resourceVersion read; the event of a
//	                                                         change of Ready once it is written
//	requeue                                                  the next probe, renewal or retirement
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := providercache.NewObject(r.Kind)
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	k := providercache.Key{Kind: r.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if !obj.GetDeletionTimestamp().IsZero() {
		return r.retire(ctx, k, obj)
	}
	st := obj.GetStatus()
	w := readiness.Begin(obj, st, &st.Conditions)
	var (
		problem error         // why the object cannot serve: a *readiness.Error
		renewal string        // why a due replacement of its credential failed
		next    time.Duration // how soon replaced instances or a registration are looked at again
	)
	if obj.GetSpec().Provisioning != nil {
		renewal, problem = r.provision(ctx, k, obj)
		var err error
		if next, err = r.retireReplaced(ctx, k, obj); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.addFinalizer(ctx, obj, tg.FinalizerInUse); err != nil {
		return ctrl.Result{}, err
	}
	if problem == nil {
		problem = r.check(ctx, k, obj)
	}
	if _, ok := readiness.ErrorOf(problem); problem != nil && !ok {
		return ctrl.Result{}, problem
	}
	message := "An authenticated read at the provider succeeded."
	if renewal != "" {
		message += " " + renewal
	}
	delivery, soon := r.registerDelivery(ctx, k, obj)
	if soon > 0 {
		next = minPositive(next, soon)
	}
	setDeliveryCondition(st, delivery)
	st.ObservedGeneration = obj.GetGeneration()
	res, err := w.Write(ctx, r.Client, r.Recorder, problem, tg.ReasonReachable, message)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("%s: %w", k, err)
	}
	return res.RequeueAfter(r.requeue(obj, res.Progress, renewal, next)), nil
}

// readinessTable is every reason of a provider object's Ready condition, with what it means: a
// settings error (a missing or unreadable Secret or CA bundle, a credential the provider refuses) is
// Stalled until someone fixes it, though the manager keeps probing and notices the fix; a provider
// that cannot be read now, or an instance it could not create, is retried. The *readiness.Error of
// each step carries the progress of its reason as this table says.
var readinessTable = []struct {
	reason   string
	progress readiness.Progress
}{
	{tg.ReasonReachable, readiness.Usable},
	{tg.ReasonCredentialUnavailable, readiness.Stalled},
	{tg.ReasonCABundleInvalid, readiness.Stalled},
	{tg.ReasonCredentialRejected, readiness.Stalled},
	{tg.ReasonCredentialForbidden, readiness.Stalled},
	{tg.ReasonUnreachable, readiness.Retrying},
	{tg.ReasonProvisioningFailed, readiness.Retrying},
}

// Readiness is every reason of the Ready condition of kind (ApprovalProvider or
// ClusterApprovalProvider), with what it means for kstatus.
func Readiness(kind string) []readiness.Row {
	rows := make([]readiness.Row, len(readinessTable))
	for i, row := range readinessTable {
		rows[i] = readiness.Row{Kind: kind, Reason: row.reason, Progress: row.progress}
	}
	return rows
}

// requeue is how soon the object is looked at again: a Ready one at its next probe, one that is not
// sooner; earlier when its credential is due to be replaced (or its replacement failed) or a
// replaced instance is to be looked at again (retire, 0 for none).
func (r *Reconciler) requeue(obj tg.GenericProvider, progress readiness.Progress, renewal string, retire time.Duration) time.Duration {
	next := reprobeNotReady
	if progress == readiness.Usable && renewal == "" {
		next = reprobeReady
	}
	if retire > 0 {
		next = min(next, retire)
	}
	if inst := providercache.ProvisionedInstance(obj); inst != nil {
		if due := renewAt(inst).Sub(r.Clock.Now()); due > 0 {
			next = min(next, due)
		}
	}
	return next
}

// check builds the provider's client and probes it. Messages name what to fix and never quote the
// credential or anything that changes from one probe to the next.
// It returns nil when the provider accepted the credential, a *readiness.Error otherwise.
func (r *Reconciler) check(ctx context.Context, k providercache.Key, obj tg.GenericProvider) error {
	hc, err := r.Providers.Current(ctx, k, obj)
	if err != nil {
		return err
	}
	if err := hc.ReloadCredential(); err != nil {
		return readiness.Stalledf(tg.ReasonCredentialUnavailable, "%s", err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err = hc.Wait(ctx, provider.Ref{ID: uuid.NewString()}, 0)
	secret, key := r.Providers.CredentialOf(k, obj)
	switch code := provider.CodeOf(err); code {
	case provider.CodeNotFound:
		return nil
	case provider.CodeUnauthenticated:
		if inst := obj.GetStatus().Instance; inst != nil && inst.CredentialExpiresAt != nil {
			return readiness.Stalledf(tg.ReasonCredentialRejected,
				"The provider refused the credential it issued for instance %s (401), which expires at %s; the manager replaces it with a new instance once two thirds of its lifetime have passed. If the provider revoked it sooner, delete this object (its pending requests are cancelled) and create it again.",
				inst.ID, inst.CredentialExpiresAt.UTC().Format(time.RFC3339))
		}
		return readiness.Stalledf(tg.ReasonCredentialRejected,
			"The provider refused the credential (401): put this instance's credential in Secret %s, key %q.", secret.Name, key)
	case provider.CodeForbidden:
		return readiness.Stalledf(tg.ReasonCredentialForbidden,
			"The provider knows the credential in Secret %s but it may not make approval requests (403): a provisioner token is not an instance credential.", secret.Name)
	default:
		cause := "provider error " + code
		if cert := providercache.CertificateProblem(err); cert != "" {
			cause = "the provider's TLS certificate could not be verified: " + cert + "; check spec.url, and that spec.caBundle or spec.caBundleRef holds the CA that signed it"
		}
		return readiness.Retryingf(tg.ReasonUnreachable, "The provider could not be read at %s (%s).", obj.GetSpec().URL, cause)
	}
}

func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		// A new generation, or the deletion (which sets the deletion timestamp and bumps the generation).
		For(providercache.NewObject(r.Kind), builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, deleting()))).
		// A call that ended may have been the last one holding a replaced instance, or a deleted
		// provider object, back.
		Watches(&tg.ToolCall{}, handler.EnqueueRequestsFromMapFunc(r.heldBy), builder.WithPredicates(callEnded())).
		Named(map[string]string{tg.KindApprovalProvider: "approvalprovider", tg.KindClusterApprovalProvider: "clusterapprovalprovider"}[r.Kind]).
		Complete(r)
}

// heldBy maps a call that ended to its provider object of this reconciler's kind, if the object
// waits for its calls to end: it has replaced instances, or it is being deleted.
func (r *Reconciler) heldBy(ctx context.Context, o client.Object) []reconcile.Request {
	k, err := providercache.Accepted(o.(*tg.ToolCall))
	if err != nil || k.Kind != r.Kind {
		return nil
	}
	key := types.NamespacedName{Namespace: k.Namespace, Name: k.Name}
	obj := providercache.NewObject(k.Kind)
	if err := r.Get(ctx, key, obj); err != nil {
		return nil
	}
	if len(obj.GetStatus().ReplacedInstances) == 0 && obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// callEnded lets through the update that ends a call.
func callEnded() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			was, is := e.ObjectOld.(*tg.ToolCall), e.ObjectNew.(*tg.ToolCall)
			return !was.Status.Phase.IsTerminal() && is.Status.Phase.IsTerminal()
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
