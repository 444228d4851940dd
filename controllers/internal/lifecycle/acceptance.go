package lifecycle

import (
	"fmt"
	"time"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// Acceptance is what a ToolCall's acceptance record fixes for the rest of its life: its timing window
// and its approval request, so that every submission of it sends the same body.
type Acceptance struct {
	Window     Window
	Submission provider.Submission
}

// ReadAcceptance reads the acceptance record the manager wrote on tc (its annotations). It fails when
// the record lacks the execution or approval timeout, or holds a Tool generation that is not a number:
// the call was not accepted yet, or not by this controller. It checks no more than that: whether the
// record holds values acceptance could have written is the acceptance check's question.
func ReadAcceptance(tc *tg.ToolCall) (Acceptance, error) {
	exec, err := AcceptedDuration(tc, tg.AnnotationExecutionTimeout)
	if err != nil {
		return Acceptance{}, err
	}
	timeout, err := AcceptedDuration(tc, tg.AnnotationApprovalTimeout)
	if err != nil {
		return Acceptance{}, err
	}
	rc, err := requestContext(tc)
	if err != nil {
		return Acceptance{}, err
	}
	return Acceptance{
		Window: NewWindow(tc, exec),
		Submission: provider.Submission{
			IdempotencyKey: string(tc.UID),
			Tool:           tc.Spec.Tool,
			Arguments:      tc.Spec.Arguments.Raw,
			Timeout:        timeout,
			AgentReasoning: tc.Spec.Reason,
			Context:        rc,
		},
	}, nil
}

// AcceptedDuration reads one duration of the acceptance record: the execution or approval timeout
// acceptance wrote. Its error says what is wrong with the record, for every reader of it.
func AcceptedDuration(tc *tg.ToolCall, key string) (time.Duration, error) {
	v, ok := tc.Annotations[key]
	if !ok {
		return 0, fmt.Errorf("annotation %s is missing (the controller writes it together with the finalizer)", key)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("annotation %s is %q, not a duration", key, v)
	}
	return d, nil
}
