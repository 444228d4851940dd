package toolcalls

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/receipt"
)

// receiptFacts is what the receipt says that the ToolCall does not: read by the reconcile.
type receiptFacts struct {
	tool     *tg.Tool // the Tool at the accepted version, nil when it changed or is gone
	provider *receipt.Provider
}

// receiptFacts reads the Tool and the provider the call was accepted against.
func (r *Reconciler) receiptFacts(ctx context.Context, tc *tg.ToolCall) (*receiptFacts, error) {
	f := &receiptFacts{}
	rec := lifecycle.ReadRecord(tc)
	if rec.Tool.UID != "" {
		tool := &tg.Tool{}
		switch err := r.Get(ctx, types.NamespacedName{Namespace: tc.Namespace, Name: rec.Tool.Name}, tool); {
		case err == nil:
			if tool.UID == rec.Tool.UID && tool.Generation == rec.Tool.Generation {
				f.tool = tool
			}
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading Tool %s for the receipt: %w", rec.Tool.Name, err)
		}
	}
	if decidedByPolicy(tc) || tc.Status.RequestID == "" {
		return f, nil
	}
	k, err := providercache.Recorded(tc, rec)
	if err != nil {
		return f, nil // the record names no readable provider: the receipt names none
	}
	p := &receipt.Provider{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
	if k == providercache.Flags {
		p.URL = r.Receipts.FlagsProviderURL
	} else if !(k.Kind == tg.KindClusterApprovalProvider && r.Providers.ClusterProvidersOff()) {
		obj := providercache.NewObject(k.Kind)
		if err := r.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Name}, obj); err == nil {
			p.URL = obj.GetSpec().URL
		} else if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading %s for the receipt: %w", k, err)
		}
	}
	f.provider = p
	return f, nil
}

// predicateOf is the receipt's predicate, but for its signer and chain.
func predicateOf(tc *tg.ToolCall, f *receiptFacts) *receipt.Predicate {
	s := &tc.Status
	p := &receipt.Predicate{
		ToolCall: receipt.ToolCall{Namespace: tc.Namespace, Name: tc.Name, UID: string(tc.UID), CreatedAt: receipt.Time(tc.CreationTimestamp.Time)},
		Outcome:  receipt.Outcome{Phase: string(s.Phase), Reason: s.Reason, Message: s.Message},
	}
	if rq := tc.Spec.Requester; rq != nil {
		p.ToolCall.Requester = &receipt.Requester{Username: rq.Username, UID: rq.UID, Groups: rq.Groups}
	}
	rec := lifecycle.ReadRecord(tc)
	p.Tool = receipt.Tool{ToolName: tc.Spec.Tool, Name: rec.Tool.Name, UID: string(rec.Tool.UID), Generation: rec.Tool.Generation}
	if f.tool != nil {
		if d, err := receipt.SpecDigest(f.tool.Spec); err == nil {
			p.Tool.SpecDigest = d
		}
	}
	if d := s.Decision; d != nil {
		pd := &receipt.Decision{Status: d.Status, DecidedAt: predicateTime(d.DecidedAt), ExpiresAt: predicateTime(d.ExpiresAt), ResponseDigest: d.ResponseDigest}
		switch {
		case d.Source == tg.DecisionSourcePolicy:
			pd.By, pd.Rule = "rule", d.Rule
		case d.Status == provider.StatusApproved || d.Status == provider.StatusDenied:
			pd.By = "human"
		default:
			pd.By = "provider"
		}
		if pd.By != "rule" {
			pd.Provider, pd.RequestID, pd.IdempotencyKey = f.provider, s.RequestID, string(tc.UID)
		}
		p.Decision = pd
	} else if s.RequestID != "" {
		// Asked, never decided (withdrawn at the limit, or unavailable): the request is still named.
		p.Decision = &receipt.Decision{By: "provider", Status: "undecided", Provider: f.provider, RequestID: s.RequestID, IdempotencyKey: string(tc.UID)}
	}
	if pv := s.Preview; pv != nil {
		p.Preview = &receipt.Preview{JobName: pv.JobName, Format: string(pv.Format), Digest: pv.Digest, Image: pv.Image, ImageID: pv.ImageID, Error: pv.Error}
	}
	p.Outcome.Ran = s.JobName != "" && s.JobUID != ""
	if p.Outcome.Ran {
		ex := &receipt.Execution{JobName: s.JobName, JobUID: string(s.JobUID)}
		if e := s.Execution; e != nil {
			ex.PodName, ex.PodUID, ex.NodeName, ex.ResultTruncated = e.PodName, string(e.PodUID), e.NodeName, e.ResultTruncated
			for _, c := range e.Containers {
				ex.Containers = append(ex.Containers, receipt.Container{Name: c.Name, Image: c.Image, ImageID: c.ImageID, ImageDigest: receipt.ImageDigest(c.ImageID),
					StartedAt: predicateTime(c.StartedAt), FinishedAt: predicateTime(c.FinishedAt), ExitCode: c.ExitCode})
			}
		}
		p.Execution = ex
	} else {
		p.Outcome.NotRun = notRunReason(s.Phase)
	}
	return p
}

// notRunReason says why a call that ended without a Job did not run.
func notRunReason(phase tg.ToolCallPhase) string {
	switch phase {
	case tg.PhaseDenied:
		return receipt.NotRunDenied
	case tg.PhaseExpired:
		return receipt.NotRunExpired
	case tg.PhaseCancelled:
		return receipt.NotRunWithdrawn
	case tg.PhaseRejected:
		return receipt.NotRunRejected
	case tg.PhaseApprovalUnavailable:
		return receipt.NotRunUnavailable
	}
	return receipt.NotRunNotStarted
}

// predicateTime writes t as the predicate does; nil is "".
func predicateTime(t *metav1.Time) string { return receipt.Time(timeOf(t)) }
