package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/internal/receipt"
	th "toolgate.dev/toolgate/test/testharness"
)

// Receipts: every ToolCall that ended holds one signed receipt that says what happened to it, and each
// namespace's receipts form one unbroken chain across the kills. A ToolCall the run deleted after it
// ended is gone with its status; its receipt is read from the log line the manager writes once the
// receipt is in the status ("Receipt signed", the envelope under "receipt"), which every manager
// process of the run keeps (fleet), so that the chain is checked whole. A kill between the status
// write and the line leaves a receipt in no log: a watch of the run's ToolCalls (receiptWatch) keeps
// every receipt a ToolCall showed, the last state of a deleted one included.
const (
	invNoReceipt    = "ended ToolCalls without a receipt in status.receipt"
	invBadReceipt   = "receipts the manager's public key does not verify, or that misstate their ToolCall (uid, phase, arguments, result, Job)"
	invTwoReceipts  = "ToolCalls with more than one receipt (their status and the managers' logs), or receipts of no ToolCall of the run"
	invChainBroken  = "breaks in a namespace's chain of receipts across the kills (gaps, forks, broken links, a head that is not its last receipt)"
	invReceiptCount = "runs whose receipts are not one per ended ToolCall"
)

// receiptWait bounds the wait, once every ToolCall ended, for the receipts of those that ended last: a
// receipt is written by the reconcile that ends its call, or by the first reconcile of the next
// manager when a kill came in between, so the last manager, which is no longer killed, writes the
// ones still missing within its start.
const receiptWait = time.Minute

// fleet keeps every manager process of a run, so that their logs can be read at the end.
type fleet struct {
	mu    sync.Mutex
	procs []*th.Process
}

func (f *fleet) add(p *th.Process) *th.Process {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs = append(f.procs, p)
	return p
}

func (f *fleet) logs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.procs))
	for _, p := range f.procs {
		out = append(out, p.Log())
	}
	return out
}

// loggedReceipt is a "Receipt signed" log line.
type loggedReceipt struct {
	Msg       string `json:"msg"`
	Namespace string `json:"receiptNamespace"`
	ToolCall  string `json:"receiptToolCall"`
	UID       string `json:"toolCallUID"`
	Digest    string `json:"digest"`
	Receipt   string `json:"receipt"`
}

// receiptsOfLogs reads the receipts the managers logged; lines that mention a receipt but do not
// decode are returned as problems.
func receiptsOfLogs(logs []string) (found []loggedReceipt, problems []string) {
	for n, log := range logs {
		sc := bufio.NewScanner(strings.NewReader(log))
		sc.Buffer(make([]byte, 0, 64*1024), 4*receipt.MaxEnvelopeBytes)
		for line := 1; sc.Scan(); line++ {
			text := sc.Text()
			if !strings.Contains(text, `"Receipt signed"`) {
				continue
			}
			var l loggedReceipt
			if err := json.Unmarshal([]byte(text), &l); err != nil || l.Msg != "Receipt signed" || l.Receipt == "" {
				problems = append(problems, fmt.Sprintf("manager %d, line %d: a receipt's log line that does not decode (%v)", n, line, err))
				continue
			}
			found = append(found, l)
		}
		if err := sc.Err(); err != nil {
			problems = append(problems, fmt.Sprintf("manager %d: reading its log: %v", n, err))
		}
	}
	return found, problems
}

// withoutReceipt lists the ToolCalls of the run that ended and hold no receipt yet.
func withoutReceipt(ctx context.Context, h *th.Harness, all []*call) []string {
	list := &tg.ToolCallList{}
	if err := h.K8s.List(ctx, list, client.InNamespace(h.NS)); err != nil {
		return []string{"listing the ToolCalls: " + err.Error()}
	}
	ours := map[types.UID]bool{}
	for _, c := range all {
		ours[c.uid] = true
	}
	var out []string
	for _, tc := range list.Items {
		if ours[tc.UID] && tc.Status.Phase.IsTerminal() && tc.Status.Receipt == nil {
			out = append(out, fmt.Sprintf("%s (%s %s)", tc.Name, tc.Status.Phase, tc.Status.Reason))
		}
	}
	slices.Sort(out)
	return out
}

// receiptTally is what the report says of the receipts.
type receiptTally struct {
	checked   int              // distinct receipts verified
	inStatus  int              // of them, held by a ToolCall that exists
	ofDeleted int              // of them, of deleted ToolCalls (from the managers' logs and the watch)
	logged    int              // "Receipt signed" log lines read
	unlogged  int              // receipts in no log line (the manager killed between the write and the line)
	ended     int              // ToolCalls that ended: terminal ones that exist, and deleted ones with a receipt
	last      map[string]int64 // namespace -> its last sequence
	// watchRestarts counts the watches of the ToolCalls started again from a list (history expired).
	watchRestarts int
}

func (t receiptTally) String() string {
	ns := make([]string, 0, len(t.last))
	for n, seq := range t.last {
		ns = append(ns, fmt.Sprintf("%s %d", n, seq))
	}
	slices.Sort(ns)
	return fmt.Sprintf("%d checked for %d ended ToolCalls (%d in the status of ToolCalls that exist, %d of deleted ToolCalls from the managers' logs and a watch of the ToolCalls; %d log lines read, %d receipts in none: the manager killed between the write and the line; %d watches restarted from a list); namespaces: %d; last sequence: %s",
		t.checked, t.ended, t.inStatus, t.ofDeleted, t.logged, t.unlogged, t.watchRestarts, len(t.last), strings.Join(ns, ", "))
}

// receipts checks the run's receipts: each ended ToolCall holds one, which the manager's public key
// verifies and which names the call, its phase, its arguments and, for a call that ran, its result and
// its Job; no call has two; each namespace's chain, deleted calls' receipts included, runs from 1
// without a gap, a fork or a broken link, up to the head the manager keeps.
func (r *report) receipts(ctx context.Context, h *th.Harness, all []*call, logs []string, watched *receiptWatch) error {
	watched.mu.Lock()
	werr := watched.err
	t := receiptTally{watchRestarts: watched.restarts}
	watched.mu.Unlock()
	if werr != nil {
		return fmt.Errorf("watching the ToolCalls' receipts: %w", werr)
	}
	key, err := managerPublicKey(ctx, h)
	if err != nil {
		return err
	}
	list := &tg.ToolCallList{}
	if err := h.K8s.List(ctx, list, client.InNamespace(h.NS)); err != nil {
		return err
	}
	byUID := map[types.UID]*tg.ToolCall{}
	for i := range list.Items {
		byUID[list.Items[i].UID] = &list.Items[i]
	}
	jobs := &batchv1.JobList{}
	if err := h.K8s.List(ctx, jobs, client.InNamespace(h.NS)); err != nil {
		return err
	}
	jobOf := map[string]types.UID{}
	for _, j := range jobs.Items {
		jobOf[j.Labels[tg.LabelToolCallUID]] = j.UID
	}
	logged, problems := receiptsOfLogs(logs)
	for _, p := range problems {
		r.flag(invBadReceipt, "%s", p)
	}
	loggedOf := map[string][]loggedReceipt{}
	inLog := map[string]bool{} // by digest
	for _, l := range logged {
		loggedOf[l.UID] = append(loggedOf[l.UID], l)
		inLog[l.Digest] = true
	}
	t.logged, t.last = len(logged), map[string]int64{}
	var chain []*receipt.Verified
	ours := map[string]bool{}
	for _, c := range all {
		uid := string(c.uid)
		ours[uid] = true
		tc := byUID[c.uid]
		// The call's receipts: the one in its status, and every one logged for it.
		var envelopes []string
		var inStatus *tg.Receipt
		if tc != nil && tc.Status.Phase.IsTerminal() {
			t.ended++
			if inStatus = tc.Status.Receipt; inStatus == nil {
				r.flag(invNoReceipt, "%s (%s %s)", c.name, tc.Status.Phase, tc.Status.Reason)
			} else {
				envelopes = append(envelopes, inStatus.Envelope)
				t.inStatus++
			}
		}
		for _, l := range loggedOf[uid] {
			envelopes = append(envelopes, l.Receipt)
		}
		envelopes = append(envelopes, watched.of(c.uid)...)
		if tc == nil && len(envelopes) > 0 {
			t.ended++ // deleted once it had ended: its receipt is in a log only
			t.ofDeleted++
		}
		verified := map[string]bool{} // by digest
		for i, env := range envelopes {
			v, err := receipt.Verify(ctx, []byte(env), key)
			if err != nil {
				r.flag(invBadReceipt, "%s: %v", c.name, err)
				continue
			}
			if i == 0 && inStatus != nil && v.Digest != inStatus.Digest {
				r.flag(invBadReceipt, "%s: status.receipt.digest is %s, its envelope's statement %s", c.name, inStatus.Digest, v.Digest)
			}
			if verified[v.Digest] {
				continue // the same receipt, in the status and in a log
			}
			verified[v.Digest] = true
			if !inLog[v.Digest] {
				t.unlogged++
			}
			for _, p := range misstatements(c, tc, v, jobOf[uid]) {
				r.flag(invBadReceipt, "%s (sequence %d): %s", c.name, v.Predicate.Chain.Sequence, p)
			}
			chain = append(chain, v)
			t.last[v.Predicate.Chain.Namespace] = max(t.last[v.Predicate.Chain.Namespace], v.Predicate.Chain.Sequence)
		}
		if len(verified) > 1 {
			r.flag(invTwoReceipts, "%s: %d receipts (%s)", c.name, len(verified), strings.Join(slices.Sorted(maps.Keys(verified)), ", "))
		}
	}
	for uid, ls := range loggedOf {
		if !ours[uid] {
			r.flag(invTwoReceipts, "receipt %s logged for ToolCall %s/%s (uid %s), which is no ToolCall of the run", ls[0].Digest, ls[0].Namespace, ls[0].ToolCall, uid)
		}
	}
	t.checked = len(chain)
	for _, p := range receipt.CheckChain(chain, 1) {
		r.flag(invChainBroken, "%s", p)
	}
	for ns, last := range t.last {
		if p := headProblem(ctx, h, ns, last, chain); p != "" {
			r.flag(invChainBroken, "namespace %s: %s", ns, p)
		}
	}
	if t.checked != t.ended {
		r.flag(invReceiptCount, "%d receipts for %d ended ToolCalls", t.checked, t.ended)
	}
	r.receiptTally = t
	return nil
}

// misstatements compares a verified receipt with the ToolCall it names (nil once deleted: then only
// with what the agent created) and with the call's Job.
func misstatements(c *call, tc *tg.ToolCall, v *receipt.Verified, job types.UID) []string {
	var out []string
	p := v.Predicate
	if p.ToolCall.UID != string(c.uid) || p.ToolCall.Name != c.name {
		out = append(out, fmt.Sprintf("names ToolCall %s (uid %s)", p.ToolCall.Name, p.ToolCall.UID))
	}
	args, err := receipt.CanonicalArguments([]byte(c.args))
	if err != nil || !v.Matches(receipt.SubjectArguments, args) {
		out = append(out, fmt.Sprintf("its arguments subject %q is not the digest of the canonical arguments %s", v.Subjects[receipt.SubjectArguments], args))
	}
	if p.Outcome.Ran != (job != "") {
		out = append(out, fmt.Sprintf("outcome.ran is %t, and the call's Job is %q", p.Outcome.Ran, job))
	}
	if p.Outcome.Ran && (p.Execution == nil || types.UID(p.Execution.JobUID) != job) {
		out = append(out, fmt.Sprintf("its execution %+v does not name the call's Job %s", p.Execution, job))
	}
	if tc == nil {
		return out
	}
	s := tc.Status
	if p.ToolCall.Namespace != tc.Namespace || p.Chain.Namespace != tc.Namespace {
		out = append(out, fmt.Sprintf("names namespace %s, chain %s", p.ToolCall.Namespace, p.Chain.Namespace))
	}
	if p.Outcome.Phase != string(s.Phase) || p.Outcome.Reason != s.Reason {
		out = append(out, fmt.Sprintf("outcome %s %s, the ToolCall ended %s %s", p.Outcome.Phase, p.Outcome.Reason, s.Phase, s.Reason))
	}
	if s.JobUID != "" || p.Outcome.Ran {
		if p.Execution == nil || types.UID(p.Execution.JobUID) != s.JobUID {
			out = append(out, fmt.Sprintf("execution.jobUID is not status.jobUID %q", s.JobUID))
		}
		if !v.Matches(receipt.SubjectResult, []byte(s.Result)) {
			out = append(out, fmt.Sprintf("its result subject %q is not the digest of status.result %q", v.Subjects[receipt.SubjectResult], s.Result))
		}
	}
	if rec := s.Receipt; rec != nil && v.Digest == rec.Digest &&
		(rec.Sequence != p.Chain.Sequence || rec.Previous != p.Chain.Previous || rec.KeyID != p.Signer.KeyID || rec.KeyID != v.KeyID) {
		out = append(out, fmt.Sprintf("status.receipt says sequence %d, previous %q, key %s; the envelope %d, %q, key %s (verified by %s)",
			rec.Sequence, rec.Previous, rec.KeyID, p.Chain.Sequence, p.Chain.Previous, p.Signer.KeyID, v.KeyID))
	}
	return out
}

// managerPublicKey reads the public key the manager published with its receipt key: the run's managers
// keep their Secrets in the run's namespace (--cluster-resource-namespace).
func managerPublicKey(ctx context.Context, h *th.Harness) (receipt.Key, error) {
	s := &corev1.Secret{}
	if err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: toolcalls.ReceiptKeySecret}, s); err != nil {
		return nil, fmt.Errorf("reading the manager's receipt key: %w", err)
	}
	key, err := receipt.ParseKey(s.Data[toolcalls.ReceiptPublicKeyField])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s field %q: %w", h.NS, toolcalls.ReceiptKeySecret, toolcalls.ReceiptPublicKeyField, err)
	}
	return key, nil
}

// headProblem compares the chain head the manager keeps for namespace ns (the annotations of the
// Lease toolgate-receipts.<ns> in its own namespace) with the last receipt found.
func headProblem(ctx context.Context, h *th.Harness, ns string, last int64, chain []*receipt.Verified) string {
	l := &coordinationv1.Lease{}
	if err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "toolgate-receipts." + ns}, l); err != nil {
		return "reading its chain head: " + err.Error()
	}
	a := l.Annotations
	seq, err := strconv.ParseInt(a["toolgate.dev/receipt-sequence"], 10, 64)
	if err != nil {
		return fmt.Sprintf("its chain head's sequence %q: %v", a["toolgate.dev/receipt-sequence"], err)
	}
	var digests []string
	for _, v := range chain {
		if v.Predicate.Chain.Namespace == ns && v.Predicate.Chain.Sequence == last {
			digests = append(digests, v.Digest)
		}
	}
	if seq != last || !slices.Contains(digests, a["toolgate.dev/receipt-digest"]) {
		return fmt.Sprintf("its chain head names receipt %d %s (ToolCall %s), but the last receipt found is %d %v",
			seq, a["toolgate.dev/receipt-digest"], a["toolgate.dev/receipt-toolcall"], last, digests)
	}
	return ""
}

// receiptWatch records every receipt a ToolCall of the run's namespace showed in a watch event, the
// last state of a deleted one included: a receipt the status write landed but whose manager was killed
// before it logged the line is in no log, and once its ToolCall is deleted in no status either.
type receiptWatch struct {
	mu       sync.Mutex
	byUID    map[types.UID]map[string]string // digest -> envelope
	restarts int                             // watches started again from a fresh list (history expired)
	err      error
}

// watchReceipts starts recording; it stops with ctx.
func watchReceipts(ctx context.Context, h *th.Harness) (*receiptWatch, error) {
	c, err := client.NewWithWatch(h.Env.Config, client.Options{Scheme: h.K8s.Scheme()})
	if err != nil {
		return nil, err
	}
	rw := &receiptWatch{byUID: map[types.UID]map[string]string{}}
	list := &tg.ToolCallList{}
	if err := c.List(ctx, list, client.InNamespace(h.NS)); err != nil {
		return nil, err
	}
	go rw.run(ctx, c, h.NS, list)
	return rw, nil
}

func (rw *receiptWatch) run(ctx context.Context, c client.WithWatch, ns string, list *tg.ToolCallList) {
	for ctx.Err() == nil {
		for i := range list.Items {
			rw.record(&list.Items[i])
		}
		rv, ok := list.ResourceVersion, true
		for ctx.Err() == nil && ok {
			w, err := c.Watch(ctx, &tg.ToolCallList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				break
			}
			rv, ok = rw.drain(w, rv)
		}
		if ctx.Err() != nil {
			return
		}
		// The history since rv is gone (or the watch could not start): list again.
		rw.mu.Lock()
		rw.restarts++
		rw.mu.Unlock()
		list = &tg.ToolCallList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			rw.mu.Lock()
			rw.err = err
			rw.mu.Unlock()
			return
		}
	}
}

// drain records a watch's events until it ends; it returns the resourceVersion to watch on from, and
// false when the history since is gone.
func (rw *receiptWatch) drain(w watch.Interface, rv string) (string, bool) {
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return rv, false
		}
		if tc, ok := ev.Object.(*tg.ToolCall); ok { // bookmarks too: a ToolCall with its resourceVersion only
			rw.record(tc)
			rv = tc.ResourceVersion
		}
	}
	return rv, true
}

func (rw *receiptWatch) record(tc *tg.ToolCall) {
	if tc.Status.Receipt == nil {
		return
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.byUID[tc.UID] == nil {
		rw.byUID[tc.UID] = map[string]string{}
	}
	rw.byUID[tc.UID][tc.Status.Receipt.Digest] = tc.Status.Receipt.Envelope
}

// of is the envelopes the watch saw for a ToolCall.
func (rw *receiptWatch) of(uid types.UID) []string {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return slices.Collect(maps.Values(rw.byUID[uid]))
}
