package toolcalls

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolgate.dev/toolgate/internal/receipt"
)

// ReceiptKeySecret is the default Secret, in the manager's namespace, that holds the key receipts are
// signed with: a PEM private key (ECDSA P-256 or Ed25519) under ReceiptKeyField. The manager makes one
// (ECDSA P-256) when it is missing, with its public key under ReceiptPublicKeyField.
const (
	ReceiptKeySecret      = "toolgate-receipt-key"
	ReceiptKeyField       = "key"
	ReceiptPublicKeyField = "key.pub"
)

// receiptKeyRefresh is how long a key read from the Secret is used before the Secret is read again,
// so that a rotated key signs the receipts from then on without a restart.
const receiptKeyRefresh = time.Minute

// ReceiptKey reads the receipt signing key from its Secret (making one when the Secret is missing)
// and reads it again every receiptKeyRefresh.
type ReceiptKey struct {
	// Client creates the Secret; Reader reads it from the apiserver.
	Client client.Client
	Reader client.Reader
	// Namespace and Name name the Secret.
	Namespace, Name string
	Clock           clock.PassiveClock

	mu     sync.Mutex
	key    receipt.Key
	readAt time.Time
}

// Get is the key to sign with now.
func (k *ReceiptKey) Get(ctx context.Context) (receipt.Key, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.Clock.Now()
	if k.key != nil && now.Sub(k.readAt) < receiptKeyRefresh {
		return k.key, nil
	}
	key, err := k.read(ctx)
	if err != nil {
		if k.key != nil {
			// The Secret cannot be read now: the key read last still signs, until it can.
			return k.key, nil
		}
		return nil, err
	}
	k.key, k.readAt = key, now
	return key, nil
}

func (k *ReceiptKey) read(ctx context.Context) (receipt.Key, error) {
	name := types.NamespacedName{Namespace: k.Namespace, Name: k.Name}
	s := &corev1.Secret{}
	err := k.Reader.Get(ctx, name, s)
	if apierrors.IsNotFound(err) {
		priv, gerr := receipt.GenerateECDSA()
		if gerr != nil {
			return nil, gerr
		}
		sv, gerr := receipt.ParseKey(priv)
		if gerr != nil {
			return nil, gerr
		}
		pub, gerr := receipt.PublicPEM(sv)
		if gerr != nil {
			return nil, gerr
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name,
				Labels: map[string]string{"app.kubernetes.io/name": "toolgate", "app.kubernetes.io/component": "receipt-key"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{ReceiptKeyField: priv, ReceiptPublicKeyField: pub},
		}
		err = k.Client.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			err = k.Reader.Get(ctx, name, s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the receipt signing key (Secret %s): %w", name, err)
	}
	key, err := receipt.ParseKey(s.Data[ReceiptKeyField])
	if err != nil {
		return nil, fmt.Errorf("the receipt signing key, Secret %s field %q: %w; put a PEM ECDSA P-256 or Ed25519 private key there (docs/receipts.md), or delete the Secret and the manager makes one", name, ReceiptKeyField, err)
	}
	if _, err := key.Sign(ctx, []byte("toolgate receipt key check")); err != nil {
		return nil, fmt.Errorf("the receipt signing key, Secret %s field %q, cannot sign (%w): it must hold the private key, not only the public one", name, ReceiptKeyField, err)
	}
	return key, nil
}
