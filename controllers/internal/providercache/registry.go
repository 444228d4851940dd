// Package providercache is the registry of approvals providers the manager's controllers and its webhook
// receiver share: which provider object serves a Tool (ApprovalProvider, ClusterApprovalProvider, or
// the manager's flags), a client for each, built from the object and the Secrets that consent to
// serve it, and why one cannot serve (a *readiness.Error).
package providercache

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/provider"
)

// Key names the approvals provider of a call: an ApprovalProvider (with its namespace), a
// ClusterApprovalProvider, or, with no kind, the manager's own provider flags.
type Key struct {
	Kind, Namespace, Name string
}

// Flags is the manager's own provider (--provider-url).
var Flags = Key{}

// String names the provider in messages.
func (k Key) String() string {
	switch k.Kind {
	case "":
		return "the manager's provider (--provider-url)"
	case tg.KindApprovalProvider:
		return fmt.Sprintf("ApprovalProvider %s/%s", k.Namespace, k.Name)
	}
	return k.Kind + " " + k.Name
}

// DefaultLabel is the provider label of the manager's own provider in Toolgate's metrics.
const DefaultLabel = "default"

// Label names the provider in the provider label of Toolgate's metrics: ApprovalProvider/<namespace>/<name>,
// ClusterApprovalProvider/<name>, or DefaultLabel for the manager's flags. Provider objects are made
// by people, so the label's values are as few as they are; a request id or URL is never part of it.
func (k Key) Label() string {
	switch k.Kind {
	case "":
		return DefaultLabel
	case tg.KindApprovalProvider:
		return k.Kind + "/" + k.Namespace + "/" + k.Name
	}
	return k.Kind + "/" + k.Name
}

// Ref is the key as the acceptance record holds it (lifecycle.Record.Provider).
func (k Key) Ref() lifecycle.ProviderRef {
	return lifecycle.ProviderRef{Kind: k.Kind, Name: k.Name}
}

// Accepted is the provider the acceptance record fixed (a record without one names the manager's
// flags), or the record's problem with it.
func Accepted(tc *tg.ToolCall) (Key, error) { return Recorded(tc, lifecycle.ReadRecord(tc)) }

// Recorded is the provider that rec, the acceptance record of tc, fixed, or rec's problem with it.
func Recorded(tc *tg.ToolCall, rec lifecycle.Record) (Key, error) {
	if err := rec.Problem(tg.AnnotationProvider); err != nil {
		return Flags, err
	}
	switch ref := rec.Provider; ref.Kind {
	case tg.KindApprovalProvider:
		return Key{Kind: ref.Kind, Namespace: tc.Namespace, Name: ref.Name}, nil
	case tg.KindClusterApprovalProvider:
		return Key{Kind: ref.Kind, Name: ref.Name}, nil
	}
	return Flags, nil
}

// Registry holds the approvals providers calls use: the manager's own (flags) and one client, with its
// connection pool, per ApprovalProvider and ClusterApprovalProvider, built from the object and its
// Secret when first needed and again when the object changes.
type Registry struct {
	// cache reads provider objects; live reads Secrets and ConfigMaps, which are never cached.
	cache, live client.Reader
	// flags is the manager's own provider, nil without --provider-url.
	flags provider.Client
	// clusterNamespace holds the Secrets and ConfigMaps ClusterApprovalProviders name.
	clusterNamespace string
	// clusterOff: ClusterApprovalProviders are not used (TurnOffClusterProviders).
	clusterOff bool
	// base is what every client built here starts from (timeouts, backoff, the hooks that count its
	// attempts and failures under its provider's label), for the provider it talks to.
	base func(Key) provider.Options

	mu      sync.Mutex
	clients map[clientKey]*providerClient
}

// clientKey names one client: a provider and, for one with spec.provisioning, one of its instances
// (its current one, or one it replaced that calls still use); "" for a provider's only credential.
type clientKey struct {
	Key
	instance string
}

// providerClient is the client of one provider object, as built from one generation of it and the
// Secret that holds its credential.
type providerClient struct {
	uid        types.UID
	generation int64
	secret     types.NamespacedName
	client     *provider.HTTPClient
}

// object reads provider object k from the cache.
func (p *Registry) object(ctx context.Context, k Key) (tg.GenericProvider, error) {
	obj := NewObject(k.Kind)
	return obj, p.cache.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Name}, obj)
}

// Live reads around the cache: Secrets and ConfigMaps, and what must not be stale.
func (p *Registry) Live() client.Reader { return p.live }

// New is a registry that reads provider objects from cache and Secrets and ConfigMaps from live;
// flags is the manager's own provider (nil without --provider-url), and base gives the options each
// client of provider k starts from (nil: the defaults).
func New(cache, live client.Reader, flags provider.Client, clusterNamespace string, base func(k Key) provider.Options) *Registry {
	if base == nil {
		base = func(Key) provider.Options { return provider.Options{} }
	}
	return &Registry{cache: cache, live: live, flags: flags, clusterNamespace: clusterNamespace, base: base,
		clients: map[clientKey]*providerClient{}}
}

// Resolve picks the provider a new call of tool is accepted with: the Tool's spec.providerRef, else
// the namespace's ApprovalProvider named default, else the ClusterApprovalProvider named default,
// else the manager's flags. A default provider being deleted is passed over.
func (p *Registry) Resolve(ctx context.Context, tool *tg.Tool) (Key, error) {
	if ref := tool.Spec.ProviderRef; ref != nil {
		if ref.Kind == tg.KindApprovalProvider {
			return Key{Kind: ref.Kind, Namespace: tool.Namespace, Name: ref.Name}, nil
		}
		return Key{Kind: ref.Kind, Name: ref.Name}, nil
	}
	for _, k := range defaultChain(tool) {
		if k == Flags {
			break
		}
		obj, err := p.object(ctx, k)
		switch {
		case err == nil && obj.GetDeletionTimestamp().IsZero():
			return k, nil
		case err == nil:
			// Being deleted: it serves the calls it has until they end, and takes no new one.
		case !apierrors.IsNotFound(err):
			return Flags, fmt.Errorf("reading %s: %w", k, err)
		}
	}
	return Flags, nil
}

// defaultChain is the order in which resolve tries the providers of a Tool without
// spec.providerRef: the namespace's ApprovalProvider named default, the ClusterApprovalProvider named
// default, the manager's flags.
func defaultChain(tool *tg.Tool) []Key {
	return []Key{
		{Kind: tg.KindApprovalProvider, Namespace: tool.Namespace, Name: tg.DefaultProviderName},
		{Kind: tg.KindClusterApprovalProvider, Name: tg.DefaultProviderName},
		Flags,
	}
}

// StillServes reports whether k, the provider a call of tool was accepted with, is still the one the
// Tool's calls go to, and returns the provider resolve picks now (cur): k is cur, or, for a Tool
// without spec.providerRef, a default that comes before cur in the chain, which resolve passed over
// because it is being deleted (it serves the calls it has until they end) or is gone. An acceptance
// record naming another provider is one this controller did not write, or one written before the
// approver pool changed (a namespace's default created since): either way its approval is not the
// pool's that the Tool resolves to.
func (p *Registry) StillServes(ctx context.Context, tool *tg.Tool, k Key) (bool, Key, error) {
	cur, err := p.Resolve(ctx, tool)
	if err != nil || cur == k || tool.Spec.ProviderRef != nil {
		return err == nil && cur == k, cur, err
	}
	chain := defaultChain(tool)
	at := slices.Index(chain, k)
	return at >= 0 && at < slices.Index(chain, cur), cur, nil
}

func NewObject(kind string) tg.GenericProvider {
	if kind == tg.KindClusterApprovalProvider {
		return &tg.ClusterApprovalProvider{}
	}
	return &tg.ApprovalProvider{}
}

// Client returns the client of provider k for a call whose request lives in instance (the call's
// tg.AnnotationProviderInstance; "" when it names none). With ready, the provider must have been
// checked for its current generation and found usable (a new submission): Ready, or only
// unreachable for now; without, any client that can still reach it will do (a wait or a cancel of a
// request already submitted, even if the object was since deleted). current is the provider's
// Current instance, which a call that names none is recorded with before its first submission.
// A *readiness.Error says why there is no client: the provider is missing or not Ready, or the
// instance is no longer kept; another error, that the provider object could not be read.
func (p *Registry) Client(ctx context.Context, k Key, ready bool, instance string) (c provider.Client, current string, err error) {
	if k == Flags {
		if p.flags == nil {
			return nil, "", readiness.Retryingf("", "no approvals provider is configured: create an ApprovalProvider or ClusterApprovalProvider named default, name one in the Tool's spec.providerRef, or set the manager's --provider-url")
		}
		return p.flags, "", nil
	}
	if p.clusterOff && k.Kind == tg.KindClusterApprovalProvider {
		return nil, "", clusterOffError(k)
	}
	obj, err := p.object(ctx, k)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("reading %s: %w", k, err)
		}
		if !ready {
			p.mu.Lock()
			known := p.clients[clientKey{k, instance}]
			p.mu.Unlock()
			if known != nil {
				return known.client, "", nil
			}
		}
		return nil, "", readiness.Retryingf("", "%s does not exist", k)
	}
	if ready {
		cond := meta.FindStatusCondition(obj.GetStatus().Conditions, tg.ConditionReady)
		// The deletion bumps the generation, and an object being deleted is not checked again: it
		// serves the calls accepted with it, a submission of theirs included (one whose status write
		// was lost recovers its request with it), as it was last found.
		checked := cond != nil && (cond.ObservedGeneration == obj.GetGeneration() || !obj.GetDeletionTimestamp().IsZero())
		switch {
		case !checked:
			return nil, "", readiness.Retryingf("", "%s has not been checked yet", k)
		case cond.Status != metav1.ConditionTrue && cond.Reason != tg.ReasonUnreachable:
			// Its settings cannot work (a missing Secret, a refused credential): nothing is
			// submitted until they are fixed. An unreachable provider is tried all the same: the
			// submission retries on its own and says why it fails.
			return nil, "", readiness.Retryingf("", "%s is not Ready (%s: %s)", k, cond.Reason, cond.Message)
		}
	}
	ck, secret, key, err := p.credentialFor(k, obj, instance)
	if err != nil {
		return nil, "", err
	}
	hc, err := p.ensure(ctx, ck, obj, secret, key)
	if err != nil {
		return nil, "", readiness.Retryingf("", "%s cannot be used: %v", k, err)
	}
	current = ""
	if inst := ProvisionedInstance(obj); inst != nil {
		current = inst.ID
	}
	return hc, current, nil
}

// credentialFor is the client, Secret and key a call whose request lives in instance talks to
// provider object obj with: the object's credential, or, for an instance it replaced, that
// instance's own Secret.
func (p *Registry) credentialFor(k Key, obj tg.GenericProvider, instance string) (ck clientKey, secret types.NamespacedName, key string, err error) {
	secret, key = p.CredentialOf(k, obj)
	cur := ProvisionedInstance(obj)
	if cur == nil {
		// An issued credential, or an instance not provisioned yet: one credential.
		return clientKey{Key: k}, secret, key, nil
	}
	if instance == "" || instance == cur.ID {
		return clientKey{k, cur.ID}, secret, key, nil
	}
	for _, old := range obj.GetStatus().ReplacedInstances {
		if old.ID == instance {
			return clientKey{k, old.ID}, types.NamespacedName{Namespace: p.NamespaceOf(k), Name: old.CredentialSecretName}, ProvisionedKey, nil
		}
	}
	return clientKey{k, instance}, secret, key, readiness.Retryingf("", "instance %s of %s, where the call's request is, is no longer kept: its credential expired, or the provider object was created anew", instance, k)
}

// InstanceOf is the current instance of provider k, "" if it has none (yet) or is not provisioned.
func (p *Registry) InstanceOf(ctx context.Context, k Key) string {
	if k == Flags {
		return ""
	}
	obj, err := p.object(ctx, k)
	if err != nil {
		return ""
	}
	if inst := ProvisionedInstance(obj); inst != nil {
		return inst.ID
	}
	return ""
}

// ProvisionedInstance is the current instance of a provider object with spec.provisioning, nil for
// one that has none (yet) or authenticates with an issued credential.
func ProvisionedInstance(obj tg.GenericProvider) *tg.ProviderInstance {
	if obj.GetSpec().Provisioning == nil {
		return nil
	}
	return obj.GetStatus().Instance
}

// ensure returns client ck of provider object obj, authenticating with key of Secret secret,
// building it when obj is new or changed or the Secret is another. A *readiness.Error says why the
// object's settings, or what they name, cannot make a client.
func (p *Registry) ensure(ctx context.Context, ck clientKey, obj tg.GenericProvider, secret types.NamespacedName, key string) (*provider.HTTPClient, error) {
	p.mu.Lock()
	known := p.clients[ck]
	p.mu.Unlock()
	if known != nil && known.uid == obj.GetUID() && known.generation == obj.GetGeneration() && known.secret == secret {
		return known.client, nil
	}
	hc, err := p.NewClient(ctx, ck.Key, obj, secret, key)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.clients[ck] = &providerClient{uid: obj.GetUID(), generation: obj.GetGeneration(), secret: secret, client: hc}
	p.mu.Unlock()
	return hc, nil
}

// Current returns the client of provider object obj's own credential: its issued one, or its
// Current instance's.
func (p *Registry) Current(ctx context.Context, k Key, obj tg.GenericProvider) (*provider.HTTPClient, error) {
	ck, secret, key, _ := p.credentialFor(k, obj, "")
	return p.ensure(ctx, ck, obj, secret, key)
}

// Drop forgets the client of an instance that was deleted.
func (p *Registry) Drop(k Key, instance string) {
	p.mu.Lock()
	delete(p.clients, clientKey{k, instance})
	p.mu.Unlock()
}

// Index is the index value of the provider k: the kind, the namespace of an ApprovalProvider,
// and the name; "" for the manager's flags.
func Index(k Key) string {
	if k == Flags {
		return ""
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// InUse reports whether calls accepted with provider k have not ended yet.
func (p *Registry) InUse(ctx context.Context, k Key) (bool, error) {
	calls := &tg.ToolCallList{}
	if err := p.cache.List(ctx, calls, client.MatchingFields{ToolCallsField: Index(k)}); err != nil {
		return false, fmt.Errorf("listing the ToolCalls of %s: %w", k, err)
	}
	for _, tc := range calls.Items {
		if !tc.Status.Phase.IsTerminal() {
			return true, nil
		}
	}
	return false, nil
}

// InUseBy reports whether calls whose requests live in instance id of provider k have not ended.
func (p *Registry) InUseBy(ctx context.Context, k Key, id string) (bool, error) {
	calls := &tg.ToolCallList{}
	if err := p.cache.List(ctx, calls, client.MatchingFields{ToolCallsField: Index(k)}); err != nil {
		return false, fmt.Errorf("listing the ToolCalls of %s: %w", k, err)
	}
	for _, tc := range calls.Items {
		if !tc.Status.Phase.IsTerminal() && lifecycle.ReadRecord(&tc).Instance == id {
			return true, nil
		}
	}
	return false, nil
}

// NamespaceOf is where the Secrets and ConfigMaps of provider k are.
func (p *Registry) NamespaceOf(k Key) string {
	if k.Kind == tg.KindClusterApprovalProvider {
		return p.clusterNamespace
	}
	return k.Namespace
}

// CredentialOf is the Secret and key that hold the instance credential of provider object obj: the
// one spec.credentialSecretRef names, or, with spec.provisioning, the Secret the manager owns.
func (p *Registry) CredentialOf(k Key, obj tg.GenericProvider) (types.NamespacedName, string) {
	spec := obj.GetSpec()
	if spec.Provisioning != nil || spec.CredentialSecretRef == nil {
		name := ProvisionedSecretName(obj, "")
		if inst := obj.GetStatus().Instance; inst != nil && inst.CredentialSecretName != "" {
			name = inst.CredentialSecretName
		}
		return types.NamespacedName{Namespace: p.NamespaceOf(k), Name: name}, ProvisionedKey
	}
	return types.NamespacedName{Namespace: p.NamespaceOf(k), Name: spec.CredentialSecretRef.Name}, KeyOr(spec.CredentialSecretRef.Key, "token")
}

// ProvisionedKey is the key of the credential in a Secret the manager owns.
const ProvisionedKey = "token"

// ProvisionedSecretName is the Secret that holds the credential of an instance the manager created
// for obj: named after the object and this incarnation of it (its UID), so that an object deleted and
// created again never reads the credential of the instance its predecessor had, and, for an instance
// that replaced another (replaces, the id of the one it replaced), after that one too.
func ProvisionedSecretName(obj tg.GenericProvider, replaces string) string {
	name := Truncate(obj.GetName(), 200)
	uid := string(obj.GetUID())
	s := fmt.Sprintf("%s-aap-credential-%s", name, uid[:min(8, len(uid))])
	if replaces != "" {
		sum := sha256.Sum256([]byte(replaces))
		s += "-" + hex.EncodeToString(sum[:4])
	}
	return s
}

// NewClient builds a client for provider object obj (its URL and CA bundle) that authenticates with
// the token under key in Secret secret: the instance credential, or the provisioner token. Its error
// is a *readiness.Error with the Ready reason.
func (p *Registry) NewClient(ctx context.Context, k Key, obj tg.GenericProvider, secret types.NamespacedName, key string) (*provider.HTTPClient, error) {
	spec := obj.GetSpec()
	opts := p.base(k)
	opts.BaseURL, opts.CredentialFile = spec.URL, ""
	opts.CABundle = spec.CABundle
	if ref := spec.CABundleRef; ref != nil {
		pem, err := p.caBundle(ctx, k, obj.GetUID(), ref)
		if err != nil {
			return nil, readiness.Stalledf(tg.ReasonCABundleInvalid, "%s", err.Error())
		}
		opts.CABundle = pem
	}
	if len(opts.CABundle) > 0 && !x509.NewCertPool().AppendCertsFromPEM(opts.CABundle) {
		return nil, readiness.Stalledf(tg.ReasonCABundleInvalid, "the CA bundle holds no PEM certificate: give the PEM of the CA that signed the provider's certificate")
	}
	uid := obj.GetUID()
	opts.Credential = func() (string, error) { return p.SecretValue(context.Background(), k, uid, secret, key) }
	hc, err := provider.NewHTTPClient(opts)
	if err != nil {
		return nil, readiness.Stalledf(tg.ReasonCredentialUnavailable, "%s", err.Error())
	}
	return hc, nil
}

func KeyOr(key, def string) string {
	if key == "" {
		return def
	}
	return key
}

// Asynchronous reports whether tc's request lives in an instance its provider delivers
// notifications for, so that it waits without a long poll.
func (p *Registry) Asynchronous(ctx context.Context, tc *tg.ToolCall) bool {
	instance := lifecycle.ReadRecord(tc).Instance
	k, err := Accepted(tc)
	if err != nil || k == Flags || instance == "" {
		return false
	}
	obj, err := p.object(ctx, k)
	if err != nil {
		return false
	}
	return DeliversTo(obj, instance)
}

// DeliversTo reports whether provider object obj delivers notifications for instance (its active
// registration is for it): the calls whose requests live there wait without a long poll.
func DeliversTo(obj tg.GenericProvider, instance string) bool {
	d := obj.GetStatus().Delivery
	return instance != "" && d != nil && d.Active != nil && d.Active.InstanceID == instance
}

// ToolCallsField indexes ToolCalls by the provider their acceptance recorded (Index).
const ToolCallsField = "toolgate.dev/provider"

// IndexToolCalls indexes ToolCalls by the provider their acceptance recorded.
func IndexToolCalls(o client.Object) []string {
	k, err := Accepted(o.(*tg.ToolCall))
	if err != nil || k == Flags {
		return nil
	}
	return []string{Index(k)}
}

// Truncate cuts s to at most n bytes, for names made from an object's.
func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
