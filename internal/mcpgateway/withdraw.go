package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
)

// Withdrawals: a call the gateway stops following before its outcome (its client cancelled it, ended
// its session or is gone, the gateway is closing, or the watch failed) is withdrawn: the gateway
// deletes its ToolCall, so Toolgate cancels its approval request (or deletes its Job if it was
// already running). Nobody reviews or runs a call that nobody waits for.
//
// The gateway withdraws as its own identity, and only the ToolCalls it created. It keeps the name and
// UID of every ToolCall it created whose outcome it has not seen (owned), and deletes with a UID
// precondition, so another ToolCall that took the same name is never deleted. It goes straight to its
// own identity instead of trying the caller's first: the caller's permission was judged when its
// ToolCall was created, and withdrawing a call whose caller is gone is the gateway's own act (the
// apiserver's audit log names the gateway, as it should); the caller's RBAC must not decide whether
// a request is left pending for a human nobody waits for; and one request that the gateway's role
// always allows replaces a refused one for every caller without delete. Its role grants delete on
// toolcalls in its namespace only (config/rbac/mcp_gateway_role.yaml).
//
// A deletion that fails (the apiserver is unreachable) is logged and retried in the background with
// an exponential backoff until the call's waiting limit, when the controller ends the call and
// withdraws its request itself. Close waits for those retries as long as its context allows, then
// stops them.

// createTimeout bounds the creation of a ToolCall, which does not end with the call's context: a
// ToolCall created while its client went away is still known by its name and UID, and withdrawn.
const createTimeout = 30 * time.Second

// defaultWithdrawBackoff spaces the retries of a withdrawal that failed.
var defaultWithdrawBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 32, Cap: 30 * time.Second}

// ownedCall is a ToolCall this gateway created and has not seen reach its outcome.
type ownedCall struct {
	name string
	uid  types.UID
	// deadline is the end of its waiting limit on the gateway's clock: the controller ends the call
	// by then, so a withdrawal is not retried past it.
	deadline time.Time
}

// run creates the ToolCall of a call (as calls' identity) and follows it to its outcome. When it
// stops following before the outcome, it withdraws the ToolCall as the gateway.
func (g *Gateway) run(ctx context.Context, calls *toolcall.Client, tool string, args json.RawMessage, limit time.Duration, o toolcall.Options) (*toolcall.Result, error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx) // gone before anything was created
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	tc, err := calls.Create(cctx, tool, args, limit, o)
	cancel()
	if err != nil {
		return nil, err
	}
	oc := g.own(tc, limit)
	if o.Progress != nil {
		o.Progress(tc.DeepCopy())
	}
	res, err := calls.Wait(ctx, tc.Name, o.Progress)
	var te *toolcall.Error
	if err == nil || errors.As(err, &te) || errors.Is(err, toolcall.ErrDeleted) {
		// The outcome, or someone else deleted the ToolCall: nothing is left to withdraw.
		g.disown(oc)
		return res, err
	}
	why := err
	if ctx.Err() != nil {
		why = context.Cause(ctx)
	}
	if g.withdraw(oc, why) {
		return res, fmt.Errorf("%w; the gateway withdrew ToolCall %s/%s, so it will not run", err, g.namespace, oc.name)
	}
	return res, fmt.Errorf("%w; the gateway could not withdraw ToolCall %s/%s yet and keeps trying until its waiting limit", err, g.namespace, oc.name)
}

// own records a ToolCall the gateway has just created.
func (g *Gateway) own(tc *tg.ToolCall, limit time.Duration) *ownedCall {
	oc := &ownedCall{name: tc.Name, uid: tc.UID, deadline: g.opts.clock.Now().Add(limit)}
	g.ownedMu.Lock()
	g.owned[oc.uid] = oc
	g.ownedMu.Unlock()
	return oc
}

// disown forgets a ToolCall whose outcome was seen, or that was withdrawn or given up on.
func (g *Gateway) disown(oc *ownedCall) {
	g.ownedMu.Lock()
	if g.owned[oc.uid] == oc {
		delete(g.owned, oc.uid)
	}
	g.ownedMu.Unlock()
}

// ownedNames lists the ToolCalls the gateway created and still follows or withdraws.
func (g *Gateway) ownedNames() []string {
	g.ownedMu.Lock()
	defer g.ownedMu.Unlock()
	names := make([]string, 0, len(g.owned))
	for _, oc := range g.owned {
		names = append(names, oc.name)
	}
	return names
}

// errNotOwned refuses the deletion of a ToolCall the gateway did not create.
var errNotOwned = errors.New("not a ToolCall this gateway created")

// deleteOwned deletes oc's ToolCall as the gateway, only if it is the object the gateway created
// (its UID). A ToolCall already gone, or replaced by another of the same name (the apiserver
// answers 409 to the precondition), is not an error: nothing of the gateway's is left.
func (g *Gateway) deleteOwned(ctx context.Context, oc *ownedCall) error {
	g.ownedMu.Lock()
	mine := g.owned[oc.uid] == oc
	g.ownedMu.Unlock()
	if !mine || oc.uid == "" {
		return fmt.Errorf("ToolCall %s/%s (uid %q): %w", g.namespace, oc.name, oc.uid, errNotOwned)
	}
	uid := oc.uid
	err := g.c.Delete(ctx, &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: oc.name}},
		client.Preconditions{UID: &uid})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		g.log.Info("the ToolCall to withdraw was replaced by another of the same name, which is left alone", "toolCall", oc.name, "uid", oc.uid)
		return nil
	case apierrors.IsForbidden(err):
		return fmt.Errorf("deleting ToolCall %s/%s as the gateway (its identity needs delete on toolcalls.toolgate.dev in namespace %s: bind the ClusterRole of config/rbac/mcp_gateway_role.yaml there with a RoleBinding): %w",
			g.namespace, oc.name, g.namespace, err)
	}
	return fmt.Errorf("deleting ToolCall %s/%s as the gateway: %w", g.namespace, oc.name, err)
}

// withdraw deletes oc's ToolCall and reports whether it is gone. When the deletion fails it is
// logged and retried in the background until oc's deadline.
func (g *Gateway) withdraw(oc *ownedCall, why error) bool {
	ctx, cancel := context.WithTimeout(g.withdrawCtx, toolcall.DeleteTimeout)
	err := g.deleteOwned(ctx, oc)
	cancel()
	if err == nil {
		g.log.V(1).Info("withdrew the ToolCall of a call nobody waits for", "toolCall", oc.name, "why", why)
		g.disown(oc)
		return true
	}
	if errors.Is(err, errNotOwned) || !g.retryWithdrawal(oc) {
		g.log.Error(err, "could not withdraw the ToolCall of a call nobody waits for: delete it to cancel its approval request",
			"toolCall", oc.name, "uid", oc.uid, "why", why)
		g.disown(oc)
		return false
	}
	g.log.Error(err, "could not withdraw the ToolCall of a call nobody waits for; retrying until its waiting limit",
		"toolCall", oc.name, "uid", oc.uid, "until", oc.deadline, "why", why)
	return false
}

// retryWithdrawal keeps trying to delete oc's ToolCall in the background, or returns false once
// Close has stopped the retries.
func (g *Gateway) retryWithdrawal(oc *ownedCall) bool {
	g.ownedMu.Lock()
	defer g.ownedMu.Unlock()
	if g.withdrawalsStopped {
		return false
	}
	g.withdrawals.Add(1)
	go func() {
		defer g.withdrawals.Done()
		defer g.disown(oc)
		g.keepWithdrawing(oc)
	}()
	return true
}

// keepWithdrawing retries the deletion of oc's ToolCall with g's backoff until it succeeds, oc's
// deadline passes, or Close stops the retries.
func (g *Gateway) keepWithdrawing(oc *ownedCall) {
	clk := g.opts.clock
	limit := clk.NewTimer(oc.deadline.Sub(clk.Now()))
	defer limit.Stop()
	next := g.opts.backoff.DelayFunc().Timer(clk)
	defer next.Stop()
	for attempt := 2; ; attempt++ {
		select {
		case <-g.withdrawCtx.Done():
			g.log.Error(nil, "the gateway stopped before it could withdraw a ToolCall: delete it to cancel its approval request", "toolCall", oc.name, "uid", oc.uid)
			return
		case <-limit.C():
			g.log.Info("stopped retrying the withdrawal of a ToolCall: its waiting limit has passed, so the controller ends it", "toolCall", oc.name, "uid", oc.uid)
			return
		case <-next.C():
		}
		if !clk.Now().Before(oc.deadline) {
			g.log.Info("stopped retrying the withdrawal of a ToolCall: its waiting limit has passed, so the controller ends it", "toolCall", oc.name, "uid", oc.uid)
			return
		}
		ctx, cancel := context.WithTimeout(g.withdrawCtx, toolcall.DeleteTimeout)
		err := g.deleteOwned(ctx, oc)
		cancel()
		if err == nil {
			g.log.Info("the ToolCall of a call nobody waits for is withdrawn", "toolCall", oc.name, "attempts", attempt)
			return
		}
		next.Next()
		g.log.Info("withdrawing a ToolCall failed again; retrying", "toolCall", oc.name, "attempt", attempt, "error", err)
	}
}
