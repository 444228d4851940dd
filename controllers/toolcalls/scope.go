package toolcalls

import (
	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/provider"
)

// scope is one reconcile of a ToolCall: the object the steps change, its acceptance record, read
// once when a step first needs it (or taken as acceptance wrote it), and the client of its
// provider, resolved once when a step first talks to the provider. Every step of the reconcile
// takes the scope.
type scope struct {
	tc *tg.ToolCall

	read       bool
	record     lifecycle.Record
	acceptance lifecycle.Acceptance
	// unreadable is why the acceptance record cannot be read (not accepted yet, or not by this
	// controller).
	unreadable error
	// own is the id of the request the provider answered this reconcile's submission with: the
	// request submitted under the call's own idempotency key.
	own string
	// client is the call's provider client (callProvider), nil until first resolved.
	client provider.Client
	// preview is status.preview once verified as the manager's (checkPreview, runPreview): it goes
	// into every submission of the call. previewProblem says why a status.preview is not trusted.
	preview        *tg.PreviewRecord
	previewProblem string
}

func newScope(tc *tg.ToolCall) *scope { return &scope{tc: tc} }

// rec is the call's acceptance record.
func (s *scope) rec() lifecycle.Record {
	if !s.read {
		s.took(lifecycle.ReadRecord(s.tc))
	}
	return s.record
}

// took sets the scope's acceptance record: the one read from the ToolCall, or the one a step has
// just written on it (lifecycle.Record.Write), which the next steps go on with unread.
func (s *scope) took(r lifecycle.Record) {
	s.record, s.read = r, true
	s.acceptance, s.unreadable = r.Acceptance(s.tc, s.preview)
}

// usePreview sets the call's verified preview; the approval request is rendered with it from now on.
func (s *scope) usePreview(p *tg.PreviewRecord) {
	s.preview = p
	if s.read {
		s.took(s.record)
	}
}

// accepted is the call's window and approval request as its acceptance record fixes them.
func (s *scope) accepted() (lifecycle.Acceptance, error) {
	s.rec()
	return s.acceptance, s.unreadable
}

// ref names the call's request at the provider: the id the status records now, and the tool and
// canonical arguments a provider's answer must echo.
func (s *scope) ref() (provider.Ref, error) {
	acc, err := s.accepted()
	if err != nil {
		return provider.Ref{}, err
	}
	ref, err := acc.Submission.Ref()
	ref.ID = s.tc.Status.RequestID
	return ref, err
}
