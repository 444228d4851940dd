package providercache

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The Secrets of provider objects: read live, and only those that consent to serve the object.

// ConsentLabel is the label by which a Secret consents to serve provider objects of k's kind.
func ConsentLabel(k Key) string {
	if k.Kind == tg.KindClusterApprovalProvider {
		return tg.LabelClusterProvider
	}
	return tg.LabelProvider
}

// consents reports whether Secret s serves provider object k, whose UID is uid: it carries k's
// consent label naming k, or k owns it.
func consents(s *corev1.Secret, k Key, uid types.UID) bool {
	if s.Labels[ConsentLabel(k)] == k.Name {
		return true
	}
	for _, o := range s.OwnerReferences {
		if uid != "" && o.UID == uid && o.Kind == k.Kind {
			return true
		}
	}
	return false
}

// consentedSecret reads Secret name for provider object k (UID uid), live: Secrets are not cached,
// so that the manager holds none of them in memory and needs only get on them. A Secret that does not
// consent to serve k is answered as one that does not exist, with the same words: whoever writes
// provider objects learns nothing of the Secrets they cannot read.
func (p *Registry) consentedSecret(ctx context.Context, k Key, uid types.UID, name types.NamespacedName, what, key string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := p.live.Get(ctx, name, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s: %s", name, apierrors.ReasonForError(err))
	}
	if err != nil || !consents(s, k, uid) {
		return nil, fmt.Errorf("no Secret %s serves %s: create it with %s under key %q and the label %s=%s, by which a Secret consents to serve this object",
			name, k, what, key, ConsentLabel(k), k.Name)
	}
	return s, nil
}

// SecretValue reads one key of a Secret that consents to serve provider object k (UID uid).
func (p *Registry) SecretValue(ctx context.Context, k Key, uid types.UID, name types.NamespacedName, key string) (string, error) {
	s, err := p.consentedSecret(ctx, k, uid, name, "the credential", key)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(s.Data[key]))
	if v == "" {
		return "", fmt.Errorf("Secret %s has no key %q, or it is empty: put the credential there", name, key)
	}
	return v, nil
}

// caBundle reads the PEM bundle a caBundleRef names.
func (p *Registry) caBundle(ctx context.Context, k Key, uid types.UID, ref *tg.CABundleRef) ([]byte, error) {
	key := KeyOr(ref.Key, "ca.crt")
	name := types.NamespacedName{Namespace: p.NamespaceOf(k), Name: ref.Name}
	if ref.Kind == "ConfigMap" {
		cm := &corev1.ConfigMap{}
		if err := p.live.Get(ctx, name, cm); err != nil {
			return nil, fmt.Errorf("reading the CA bundle's ConfigMap %s: %w", name, err)
		}
		if v := cm.Data[key]; v != "" {
			return []byte(v), nil
		}
		return nil, fmt.Errorf("ConfigMap %s has no key %q holding the CA bundle", name, key)
	}
	s, err := p.consentedSecret(ctx, k, uid, name, "the CA bundle", key)
	if err != nil {
		return nil, err
	}
	if v := s.Data[key]; len(v) > 0 {
		return v, nil
	}
	return nil, fmt.Errorf("Secret %s has no key %q holding the CA bundle", name, key)
}
