package toolcalls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/receipt"
	"toolgate.dev/toolgate/internal/version"
)

// Receipts signs the receipt of every ToolCall that ends (docs/receipts.md) and keeps each
// namespace's chain of receipts.
//
// The ToolCall's status is where a receipt exists: a receipt counts once the status write that holds
// it succeeded. Each namespace's chain head, the annotations of a Lease in the manager's namespace
// (chainLease; the manager may write Leases there already, for leader election), is written before
// that status write and names the receipt it is about to
// hold. The two writes are serialised per namespace, so at most one head is unconfirmed at a time
// (after a crash between them): the next receipt of the namespace reads that ToolCall again, from the
// apiserver, and either finds the receipt there (the chain goes on after it) or not (the receipt was
// never written: its sequence number is given to the next receipt, with the same previous digest). A
// ToolCall that is gone held the receipt the head names: an ended call keeps its finalizer until it
// holds its receipt, and the head is moved only for a call the apiserver shows without one, so the
// last head that names a call names the receipt it holds. Either way no receipt that exists is left
// out of the chain, and none is counted twice. The status write carries the resourceVersion it read,
// so a receipt is written only over a status without one.
type Receipts struct {
	Client client.Client
	// Reader reads around the cache: heads and ToolCalls whose receipt is in doubt.
	Reader client.Reader
	Key    *ReceiptKey
	// Namespace is the manager's namespace, where the chain heads are.
	Namespace string
	// FlagsProviderURL is the manager's --provider-url, named in the receipts of calls it served.
	FlagsProviderURL string

	mu     sync.Mutex
	chains map[string]*chain
}

// chain is one namespace's head as this manager last wrote or read it.
type chain struct {
	mu   sync.Mutex
	head *chainHead
	// confirmed: the receipt the head names is in its ToolCall's status (this manager wrote it).
	confirmed bool
}

// chainHead is what the head Lease's annotations hold.
type chainHead struct {
	Sequence    int64
	Digest      string
	Previous    string
	ToolCall    string
	ToolCallUID types.UID
	// resourceVersion is the Lease's, "" when it does not exist yet.
	resourceVersion string
}

// Annotations of the head Lease.
const (
	headNamespace   = "toolgate.dev/receipt-namespace"
	headSequence    = "toolgate.dev/receipt-sequence"
	headDigest      = "toolgate.dev/receipt-digest"
	headPrevious    = "toolgate.dev/receipt-previous"
	headToolCall    = "toolgate.dev/receipt-toolcall"
	headToolCallUID = "toolgate.dev/receipt-toolcall-uid"
)

// chainLease names the Lease that holds namespace ns's chain head.
func chainLease(ns string) string { return "toolgate-receipts." + ns }

func (rs *Receipts) chainOf(ns string) *chain {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.chains == nil {
		rs.chains = map[string]*chain{}
	}
	c := rs.chains[ns]
	if c == nil {
		c = &chain{}
		rs.chains[ns] = c
	}
	return c
}

// errReceiptRetry is returned when a write the receipt needs found the object changed: the reconcile
// is retried.
var errReceiptRetry = errors.New("the receipt's chain head or its ToolCall changed while it was written; trying again")

// Issue signs tc's receipt and writes it into tc's status; tc has ended and holds none. On success tc
// holds the receipt and its new resourceVersion.
func (rs *Receipts) Issue(ctx context.Context, tc *tg.ToolCall, facts *receiptFacts) error {
	c := rs.chainOf(tc.Namespace)
	c.mu.Lock()
	defer c.mu.Unlock()
	if done, err := rs.live(ctx, tc); done || err != nil {
		return err
	}
	return rs.issue(ctx, c, tc, facts)
}

// issue signs the namespace's next receipt for tc, moves the chain head to it, then writes it into
// tc's status. Called with c.mu held.
func (rs *Receipts) issue(ctx context.Context, c *chain, tc *tg.ToolCall, facts *receiptFacts) error {
	seq, prev, err := rs.nextSlot(ctx, c, tc)
	if err != nil || seq == 0 {
		return err // seq 0: tc already holds its receipt (the cache was behind)
	}
	key, err := rs.Key.Get(ctx)
	if err != nil {
		return err
	}
	now := metav1.Now()
	p := predicateOf(tc, facts)
	p.Signer = receipt.Signer{ManagerVersion: version.Get(), KeyID: receipt.KeyID(key), SignedAt: receipt.Time(now.Time)}
	p.Chain = receipt.Chain{Namespace: tc.Namespace, Sequence: seq, Previous: prev}
	var result []byte
	if p.Outcome.Ran {
		result = []byte(tc.Status.Result)
	}
	st, err := receipt.Statement(tc.Spec.Arguments.Raw, result, p)
	if err != nil {
		return err
	}
	env, err := receipt.Sign(ctx, key, st)
	if err != nil {
		return err
	}
	rec := &tg.Receipt{Envelope: string(env), Digest: receipt.Digest(st), Sequence: seq, Previous: prev, KeyID: p.Signer.KeyID}
	head := &chainHead{Sequence: seq, Digest: rec.Digest, Previous: prev, ToolCall: tc.Name, ToolCallUID: tc.UID}
	if c.head != nil {
		head.resourceVersion = c.head.resourceVersion
	}
	if err := rs.writeHead(ctx, tc.Namespace, head); err != nil {
		c.head = nil // read it again
		return err
	}
	c.head, c.confirmed = head, false
	if err := rs.writeReceipt(ctx, tc, rec); err != nil {
		return err
	}
	c.confirmed = true
	logf.FromContext(ctx).Info("Receipt signed", "receiptNamespace", tc.Namespace, "receiptToolCall", tc.Name, "toolCallUID", tc.UID,
		"phase", tc.Status.Phase, "sequence", seq, "digest", rec.Digest, "previous", prev, "keyID", rec.KeyID, "receipt", rec.Envelope)
	return nil
}

// live reads tc from the apiserver, around the cache, before the chain head is moved for it: a head
// that named a call already holding its receipt (the cache behind) would, once that call is gone, be
// taken for a receipt that exists. done: tc holds its receipt (tc is then what the apiserver holds),
// or is gone.
func (rs *Receipts) live(ctx context.Context, tc *tg.ToolCall) (done bool, err error) {
	cur := &tg.ToolCall{}
	err = rs.Reader.Get(ctx, types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}, cur)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading ToolCall %s before writing its receipt: %w", tc.Name, err)
	case cur.UID != tc.UID:
		return true, nil
	}
	*tc = *cur
	return tc.Status.Receipt != nil, nil
}

// nextSlot is the sequence number and previous digest of the namespace's next receipt; 0 when tc
// turns out to hold its receipt already.
func (rs *Receipts) nextSlot(ctx context.Context, c *chain, tc *tg.ToolCall) (int64, string, error) {
	if c.head == nil {
		h, err := rs.readHead(ctx, tc.Namespace)
		if err != nil {
			return 0, "", err
		}
		c.head, c.confirmed = h, h.Sequence == 0
	}
	h := c.head
	if c.confirmed {
		return h.Sequence + 1, h.Digest, nil
	}
	// The head names a receipt whose status write this manager has not seen succeed: read its
	// ToolCall from the apiserver.
	held := &tg.ToolCall{}
	err := rs.Reader.Get(ctx, types.NamespacedName{Namespace: tc.Namespace, Name: h.ToolCall}, held)
	switch {
	case apierrors.IsNotFound(err), err == nil && held.UID != h.ToolCallUID:
		// Gone (deleted by its owner or by retention), so it held the receipt the head names: its
		// finalizer stays until it holds one, and the head was moved for it only while it held none.
		c.confirmed = true
		return h.Sequence + 1, h.Digest, nil
	case err != nil:
		return 0, "", fmt.Errorf("reading ToolCall %s, whose receipt the chain head of namespace %s names: %w", h.ToolCall, tc.Namespace, err)
	}
	if held.Status.Receipt != nil {
		if held.Status.Receipt.Digest == h.Digest {
			c.confirmed = true
			if held.UID == tc.UID {
				*tc = *held
				return 0, "", nil
			}
			return h.Sequence + 1, h.Digest, nil
		}
		if held.UID == tc.UID {
			// tc holds another receipt, written before the head moved on: it is already in the
			// chain.
			*tc = *held
			return 0, "", nil
		}
	}
	if held.UID == tc.UID && held.Status.Receipt == nil {
		// The write of tc's receipt was lost: write it on what the apiserver holds.
		*tc = *held
	}
	// The receipt the head names was never written: its number goes to this one.
	return h.Sequence, h.Previous, nil
}

func (rs *Receipts) readHead(ctx context.Context, ns string) (*chainHead, error) {
	l := &coordinationv1.Lease{}
	err := rs.Reader.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: chainLease(ns)}, l)
	if apierrors.IsNotFound(err) {
		return &chainHead{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the receipt chain head of namespace %s (Lease %s/%s): %w", ns, rs.Namespace, chainLease(ns), err)
	}
	a := l.Annotations
	seq, err := strconv.ParseInt(a[headSequence], 10, 64)
	if err != nil || seq < 0 || a[headNamespace] != ns {
		return nil, fmt.Errorf("the receipt chain head of namespace %s (Lease %s/%s) is unreadable: it was written by someone other than the manager; restore its annotations from the last receipt of the namespace, or delete it to start a new chain (docs/receipts.md)", ns, rs.Namespace, chainLease(ns))
	}
	return &chainHead{Sequence: seq, Digest: a[headDigest], Previous: a[headPrevious], ToolCall: a[headToolCall],
		ToolCallUID: types.UID(a[headToolCallUID]), resourceVersion: l.ResourceVersion}, nil
}

func (rs *Receipts) writeHead(ctx context.Context, ns string, h *chainHead) error {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: rs.Namespace, Name: chainLease(ns), ResourceVersion: h.resourceVersion,
			Labels: map[string]string{"app.kubernetes.io/name": "toolgate", "app.kubernetes.io/component": "receipt-chain"},
			Annotations: map[string]string{headNamespace: ns, headSequence: strconv.FormatInt(h.Sequence, 10), headDigest: h.Digest,
				headPrevious: h.Previous, headToolCall: h.ToolCall, headToolCallUID: string(h.ToolCallUID)}},
	}
	var err error
	if h.resourceVersion == "" {
		err = rs.Client.Create(ctx, l)
	} else {
		err = rs.Client.Update(ctx, l)
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return errReceiptRetry
	case err != nil:
		return fmt.Errorf("writing the receipt chain head of namespace %s: %w", ns, err)
	}
	h.resourceVersion = l.ResourceVersion
	return nil
}

// writeReceipt writes rec into tc's status, on the resourceVersion tc was read at.
func (rs *Receipts) writeReceipt(ctx context.Context, tc *tg.ToolCall, rec *tg.Receipt) error {
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]string{"resourceVersion": tc.ResourceVersion},
		"status":   map[string]any{"receipt": rec},
	})
	if err != nil {
		return err
	}
	if err := rs.Client.Status().Patch(ctx, tc, client.RawPatch(types.MergePatchType, data)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return errReceiptRetry
		}
		return fmt.Errorf("writing the receipt: %w", err)
	}
	return nil
}

// issueReceipt writes the receipt of tc, which has ended, unless it holds one or receipts are off.
func (r *Reconciler) issueReceipt(ctx context.Context, tc *tg.ToolCall) error {
	if r.Receipts == nil || tc.Status.Receipt != nil || !tc.Status.Phase.IsTerminal() {
		return nil
	}
	facts, err := r.receiptFacts(ctx, tc)
	if err != nil {
		return err
	}
	if err := r.Receipts.Issue(ctx, tc, facts); err != nil {
		return err
	}
	r.written.wrote(tc)
	return nil
}

// awaitsReceipt reports whether tc has ended without its receipt yet: its finalizer stays, and
// retention keeps it, until the receipt is written.
func (r *Reconciler) awaitsReceipt(tc *tg.ToolCall) bool {
	return r.Receipts != nil && tc.Status.Phase.IsTerminal() && tc.Status.Receipt == nil
}
