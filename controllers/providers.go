package controllers

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// providerKey names the approvals provider of a call: an ApprovalProvider (with its namespace), a
// ClusterApprovalProvider, or, with no kind, the manager's own provider flags.
type providerKey struct {
	kind, namespace, name string
}

// flagsProvider is the manager's own provider (--provider-url).
var flagsProvider = providerKey{}

// String names the provider in messages.
func (k providerKey) String() string {
	switch k.kind {
	case "":
		return "the manager's provider (--provider-url)"
	case tg.KindApprovalProvider:
		return fmt.Sprintf("ApprovalProvider %s/%s", k.namespace, k.name)
	}
	return k.kind + " " + k.name
}

// annotation is the key as the acceptance record holds it (tg.AnnotationProvider).
func (k providerKey) annotation() string {
	if k.kind == "" {
		return ""
	}
	return k.kind + "/" + k.name
}

// acceptedProvider reads the provider the acceptance record fixed. A record without it names the
// manager's flags.
func acceptedProvider(tc *tg.ToolCall) (providerKey, error) {
	v := tc.Annotations[tg.AnnotationProvider]
	if v == "" {
		return flagsProvider, nil
	}
	kind, name, ok := strings.Cut(v, "/")
	switch {
	case !ok || name == "":
	case kind == tg.KindApprovalProvider:
		return providerKey{kind: kind, namespace: tc.Namespace, name: name}, nil
	case kind == tg.KindClusterApprovalProvider:
		return providerKey{kind: kind, name: name}, nil
	}
	return flagsProvider, fmt.Errorf("annotation %s is %q, not ApprovalProvider/<name> or ClusterApprovalProvider/<name>", tg.AnnotationProvider, v)
}

// providers are the approvals providers calls use: the manager's own (flags) and one client, with its
// connection pool, per ApprovalProvider and ClusterApprovalProvider, built from the object and its
// Secret when first needed and again when the object changes.
type providers struct {
	// cache reads provider objects; live reads Secrets and ConfigMaps, which are never cached.
	cache, live client.Reader
	// flags is the manager's own provider, nil without --provider-url.
	flags provider.Client
	// clusterNamespace holds the Secrets and ConfigMaps ClusterApprovalProviders name.
	clusterNamespace string
	// base is what every client built here starts from (timeouts, backoff, error metrics).
	base provider.Options

	mu      sync.Mutex
	clients map[clientKey]*providerClient
}

// clientKey names one client: a provider and, for one with spec.provisioning, one of its instances
// (its current one, or one it replaced that calls still use); "" for a provider's only credential.
type clientKey struct {
	providerKey
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

func newProviders(cache, live client.Reader, flags provider.Client, clusterNamespace string, base provider.Options) *providers {
	return &providers{cache: cache, live: live, flags: flags, clusterNamespace: clusterNamespace, base: base,
		clients: map[clientKey]*providerClient{}}
}

// resolve picks the provider a new call of tool is accepted with: the Tool's spec.providerRef, else
// the namespace's ApprovalProvider named default, else the ClusterApprovalProvider named default,
// else the manager's flags. A default provider being deleted is passed over.
func (p *providers) resolve(ctx context.Context, tool *tg.Tool) (providerKey, error) {
	if ref := tool.Spec.ProviderRef; ref != nil {
		if ref.Kind == tg.KindApprovalProvider {
			return providerKey{kind: ref.Kind, namespace: tool.Namespace, name: ref.Name}, nil
		}
		return providerKey{kind: ref.Kind, name: ref.Name}, nil
	}
	for _, k := range defaultChain(tool) {
		if k == flagsProvider {
			break
		}
		obj := newProviderObject(k.kind)
		err := p.cache.Get(ctx, types.NamespacedName{Namespace: k.namespace, Name: k.name}, obj)
		switch {
		case err == nil && obj.GetDeletionTimestamp().IsZero():
			return k, nil
		case err == nil:
			// Being deleted: it serves the calls it has until they end, and takes no new one.
		case !apierrors.IsNotFound(err):
			return flagsProvider, fmt.Errorf("reading %s: %w", k, err)
		}
	}
	return flagsProvider, nil
}

// defaultChain is the order in which resolve tries the providers of a Tool without
// spec.providerRef: the namespace's ApprovalProvider named default, the ClusterApprovalProvider named
// default, the manager's flags.
func defaultChain(tool *tg.Tool) []providerKey {
	return []providerKey{
		{kind: tg.KindApprovalProvider, namespace: tool.Namespace, name: tg.DefaultProviderName},
		{kind: tg.KindClusterApprovalProvider, name: tg.DefaultProviderName},
		flagsProvider,
	}
}

// stillServes reports whether k, the provider a call of tool was accepted with, is still the one the
// Tool's calls go to, and returns the provider resolve picks now (cur): k is cur, or, for a Tool
// without spec.providerRef, a default that comes before cur in the chain, which resolve passed over
// because it is being deleted (it serves the calls it has until they end) or is gone. An acceptance
// record naming another provider is one this controller did not write, or one written before the
// approver pool changed (a namespace's default created since): either way its approval is not the
// pool's that the Tool resolves to.
func (p *providers) stillServes(ctx context.Context, tool *tg.Tool, k providerKey) (bool, providerKey, error) {
	cur, err := p.resolve(ctx, tool)
	if err != nil || cur == k || tool.Spec.ProviderRef != nil {
		return err == nil && cur == k, cur, err
	}
	chain := defaultChain(tool)
	at := slices.Index(chain, k)
	return at >= 0 && at < slices.Index(chain, cur), cur, nil
}

func newProviderObject(kind string) tg.GenericProvider {
	if kind == tg.KindClusterApprovalProvider {
		return &tg.ClusterApprovalProvider{}
	}
	return &tg.ApprovalProvider{}
}

// client returns the client of provider k for a call whose request lives in instance (the call's
// tg.AnnotationProviderInstance; "" when it names none). With ready, the provider must have been
// checked for its current generation and found usable (a new submission): Ready, or only
// unreachable for now; without, any client that can still reach it will do (a wait or a cancel of a
// request already submitted, even if the object was since deleted). current is the provider's
// current instance, which a call that names none is recorded with before its first submission.
// An *unusable error says why there is no client: the provider is missing or not Ready, or the
// instance is no longer kept; another error, that the provider object could not be read.
func (p *providers) client(ctx context.Context, k providerKey, ready bool, instance string) (c provider.Client, current string, err error) {
	if k == flagsProvider {
		if p.flags == nil {
			return nil, "", unusablef("", "no approvals provider is configured: create an ApprovalProvider or ClusterApprovalProvider named default, name one in the Tool's spec.providerRef, or set the manager's --provider-url")
		}
		return p.flags, "", nil
	}
	obj := newProviderObject(k.kind)
	if err := p.cache.Get(ctx, types.NamespacedName{Namespace: k.namespace, Name: k.name}, obj); err != nil {
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
		return nil, "", unusablef("", "%s does not exist", k)
	}
	if ready {
		cond := meta.FindStatusCondition(obj.GetStatus().Conditions, tg.ConditionReady)
		// The deletion bumps the generation, and an object being deleted is not checked again: it
		// serves the calls accepted with it, a submission of theirs included (one whose status write
		// was lost recovers its request with it), as it was last found.
		checked := cond != nil && (cond.ObservedGeneration == obj.GetGeneration() || !obj.GetDeletionTimestamp().IsZero())
		switch {
		case !checked:
			return nil, "", unusablef("", "%s has not been checked yet", k)
		case cond.Status != metav1.ConditionTrue && cond.Reason != tg.ReasonUnreachable:
			// Its settings cannot work (a missing Secret, a refused credential): nothing is
			// submitted until they are fixed. An unreachable provider is tried all the same: the
			// submission retries on its own and says why it fails.
			return nil, "", unusablef("", "%s is not Ready (%s: %s)", k, cond.Reason, cond.Message)
		}
	}
	ck, secret, key, err := p.credentialFor(k, obj, instance)
	if err != nil {
		return nil, "", err
	}
	hc, err := p.ensure(ctx, ck, obj, secret, key)
	if err != nil {
		return nil, "", unusablef("", "%s cannot be used: %v", k, err)
	}
	current = ""
	if inst := provisionedInstance(obj); inst != nil {
		current = inst.ID
	}
	return hc, current, nil
}

// credentialFor is the client, Secret and key a call whose request lives in instance talks to
// provider object obj with: the object's credential, or, for an instance it replaced, that
// instance's own Secret.
func (p *providers) credentialFor(k providerKey, obj tg.GenericProvider, instance string) (ck clientKey, secret types.NamespacedName, key string, err error) {
	secret, key = p.credentialOf(k, obj)
	cur := provisionedInstance(obj)
	if cur == nil {
		// An issued credential, or an instance not provisioned yet: one credential.
		return clientKey{providerKey: k}, secret, key, nil
	}
	if instance == "" || instance == cur.ID {
		return clientKey{k, cur.ID}, secret, key, nil
	}
	for _, old := range obj.GetStatus().ReplacedInstances {
		if old.ID == instance {
			return clientKey{k, old.ID}, types.NamespacedName{Namespace: p.namespaceOf(k), Name: old.CredentialSecretName}, provisionedKey, nil
		}
	}
	return clientKey{k, instance}, secret, key, unusablef("", "instance %s of %s, where the call's request is, is no longer kept: its credential expired, or the provider object was created anew", instance, k)
}

// instanceOf is the current instance of provider k, "" if it has none (yet) or is not provisioned.
func (p *providers) instanceOf(ctx context.Context, k providerKey) string {
	if k == flagsProvider {
		return ""
	}
	obj := newProviderObject(k.kind)
	if err := p.cache.Get(ctx, types.NamespacedName{Namespace: k.namespace, Name: k.name}, obj); err != nil {
		return ""
	}
	if inst := provisionedInstance(obj); inst != nil {
		return inst.ID
	}
	return ""
}

// provisionedInstance is the current instance of a provider object with spec.provisioning, nil for
// one that has none (yet) or authenticates with an issued credential.
func provisionedInstance(obj tg.GenericProvider) *tg.ProviderInstance {
	if obj.GetSpec().Provisioning == nil {
		return nil
	}
	return obj.GetStatus().Instance
}

// ensure returns client ck of provider object obj, authenticating with key of Secret secret,
// building it when obj is new or changed or the Secret is another. An *unusable error says why the
// object's settings, or what they name, cannot make a client.
func (p *providers) ensure(ctx context.Context, ck clientKey, obj tg.GenericProvider, secret types.NamespacedName, key string) (*provider.HTTPClient, error) {
	p.mu.Lock()
	known := p.clients[ck]
	p.mu.Unlock()
	if known != nil && known.uid == obj.GetUID() && known.generation == obj.GetGeneration() && known.secret == secret {
		return known.client, nil
	}
	hc, err := p.newClient(ctx, ck.providerKey, obj, secret, key)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.clients[ck] = &providerClient{uid: obj.GetUID(), generation: obj.GetGeneration(), secret: secret, client: hc}
	p.mu.Unlock()
	return hc, nil
}

// current returns the client of provider object obj's own credential: its issued one, or its
// current instance's.
func (p *providers) current(ctx context.Context, k providerKey, obj tg.GenericProvider) (*provider.HTTPClient, error) {
	ck, secret, key, _ := p.credentialFor(k, obj, "")
	return p.ensure(ctx, ck, obj, secret, key)
}

// drop forgets the client of an instance that was deleted.
func (p *providers) drop(ck clientKey) {
	p.mu.Lock()
	delete(p.clients, ck)
	p.mu.Unlock()
}

// providerIndex is the index value of the provider k: the kind, the namespace of an ApprovalProvider,
// and the name; "" for the manager's flags.
func providerIndex(k providerKey) string {
	if k == flagsProvider {
		return ""
	}
	return k.kind + "/" + k.namespace + "/" + k.name
}

// inUse reports whether calls accepted with provider k have not ended yet.
func (p *providers) inUse(ctx context.Context, k providerKey) (bool, error) {
	calls := &tg.ToolCallList{}
	if err := p.cache.List(ctx, calls, client.MatchingFields{providerField: providerIndex(k)}); err != nil {
		return false, fmt.Errorf("listing the ToolCalls of %s: %w", k, err)
	}
	for _, tc := range calls.Items {
		if !tc.Status.Phase.IsTerminal() {
			return true, nil
		}
	}
	return false, nil
}

// inUseBy reports whether calls whose requests live in instance id of provider k have not ended.
func (p *providers) inUseBy(ctx context.Context, k providerKey, id string) (bool, error) {
	calls := &tg.ToolCallList{}
	if err := p.cache.List(ctx, calls, client.MatchingFields{providerField: providerIndex(k)}); err != nil {
		return false, fmt.Errorf("listing the ToolCalls of %s: %w", k, err)
	}
	for _, tc := range calls.Items {
		if !tc.Status.Phase.IsTerminal() && tc.Annotations[tg.AnnotationProviderInstance] == id {
			return true, nil
		}
	}
	return false, nil
}

// namespaceOf is where the Secrets and ConfigMaps of provider k are.
func (p *providers) namespaceOf(k providerKey) string {
	if k.kind == tg.KindClusterApprovalProvider {
		return p.clusterNamespace
	}
	return k.namespace
}

// credentialOf is the Secret and key that hold the instance credential of provider object obj: the
// one spec.credentialSecretRef names, or, with spec.provisioning, the Secret the manager owns.
func (p *providers) credentialOf(k providerKey, obj tg.GenericProvider) (types.NamespacedName, string) {
	spec := obj.GetSpec()
	if spec.Provisioning != nil || spec.CredentialSecretRef == nil {
		name := provisionedSecretName(obj, "")
		if inst := obj.GetStatus().Instance; inst != nil && inst.CredentialSecretName != "" {
			name = inst.CredentialSecretName
		}
		return types.NamespacedName{Namespace: p.namespaceOf(k), Name: name}, provisionedKey
	}
	return types.NamespacedName{Namespace: p.namespaceOf(k), Name: spec.CredentialSecretRef.Name}, keyOr(spec.CredentialSecretRef.Key, "token")
}

// provisionedKey is the key of the credential in a Secret the manager owns.
const provisionedKey = "token"

// provisionedSecretName is the Secret that holds the credential of an instance the manager created
// for obj: named after the object and this incarnation of it (its UID), so that an object deleted and
// created again never reads the credential of the instance its predecessor had, and, for an instance
// that replaced another (replaces, the id of the one it replaced), after that one too.
func provisionedSecretName(obj tg.GenericProvider, replaces string) string {
	name := truncate(obj.GetName(), 200)
	uid := string(obj.GetUID())
	s := fmt.Sprintf("%s-aap-credential-%s", name, uid[:min(8, len(uid))])
	if replaces != "" {
		sum := sha256.Sum256([]byte(replaces))
		s += "-" + hex.EncodeToString(sum[:4])
	}
	return s
}

// newClient builds a client for provider object obj (its URL and CA bundle) that authenticates with
// the token under key in Secret secret: the instance credential, or the provisioner token. Its error
// is an *unusable with the Ready reason.
func (p *providers) newClient(ctx context.Context, k providerKey, obj tg.GenericProvider, secret types.NamespacedName, key string) (*provider.HTTPClient, error) {
	spec := obj.GetSpec()
	opts := p.base
	opts.BaseURL, opts.CredentialFile = spec.URL, ""
	opts.CABundle = spec.CABundle
	if ref := spec.CABundleRef; ref != nil {
		pem, err := p.caBundle(ctx, k, obj.GetUID(), ref)
		if err != nil {
			return nil, &unusable{reason: tg.ReasonCABundleInvalid, message: err.Error()}
		}
		opts.CABundle = pem
	}
	if len(opts.CABundle) > 0 && !x509.NewCertPool().AppendCertsFromPEM(opts.CABundle) {
		return nil, unusablef(tg.ReasonCABundleInvalid, "the CA bundle holds no PEM certificate: give the PEM of the CA that signed the provider's certificate")
	}
	uid := obj.GetUID()
	opts.Credential = func() (string, error) { return p.secretValue(context.Background(), k, uid, secret, key) }
	hc, err := provider.NewHTTPClient(opts)
	if err != nil {
		return nil, &unusable{reason: tg.ReasonCredentialUnavailable, message: err.Error()}
	}
	return hc, nil
}

func keyOr(key, def string) string {
	if key == "" {
		return def
	}
	return key
}
