package toolcall

import (
	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/internal/provider"
)

// scope is one reconcile of a ToolCall: the object the steps change, and its acceptance record, read
// once when a step first needs it. Every step of the reconcile takes the scope.
type scope struct {
	tc *tg.ToolCall

	read       bool
	acceptance lifecycle.Acceptance
	// unreadable is why the acceptance record cannot be read (not accepted yet, or not by this
	// controller).
	unreadable error
	// own is the id of the request the provider answered this reconcile's submission with: the
	// request submitted under the call's own idempotency key.
	own string
}

func newScope(tc *tg.ToolCall) *scope { return &scope{tc: tc} }

// accepted is the call's window and approval request as its acceptance record fixes them.
func (s *scope) accepted() (lifecycle.Acceptance, error) {
	if !s.read {
		s.acceptance, s.unreadable = lifecycle.ReadAcceptance(s.tc)
		s.read = true
	}
	return s.acceptance, s.unreadable
}

// recorded says that acceptance has just written the acceptance record: the next step reads it.
func (s *scope) recorded() { s.read = false }

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
