package lifecycle

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The context object of an approval request: runtime facts the manager observed, which a provider
// shows its approvers next to the arguments. It is built only from what never changes once the
// ToolCall is accepted (its identity, its immutable spec, the acceptance record), so that every
// submission of the call, a replay after a crash included, is the same request. It establishes no
// identity at the provider; the instance credential does.
type requestContextBody struct {
	Namespace string           `json:"namespace"`
	ToolCall  toolCallContext  `json:"tool_call"`
	Requester *requesterFacts  `json:"requester,omitempty"`
	Tool      *toolFactsAtCall `json:"tool,omitempty"`
}

type toolCallContext struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// requesterFacts is who created the ToolCall, as the apiserver authenticated them (spec.requester).
type requesterFacts struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

// toolFactsAtCall is the Tool the call was accepted against.
type toolFactsAtCall struct {
	Name       string `json:"name,omitempty"`
	Generation int64  `json:"generation"`
}

// requestContext renders the context object of tc's approval request, accepted with record r.
func requestContext(tc *tg.ToolCall, r Record) ([]byte, error) {
	body := requestContextBody{Namespace: tc.Namespace, ToolCall: toolCallContext{Name: tc.Name, UID: string(tc.UID)}}
	if rq := tc.Spec.Requester; rq != nil {
		groups := rq.Groups
		if groups == nil {
			groups = []string{}
		}
		body.Requester = &requesterFacts{Username: rq.Username, Groups: groups}
	}
	if r.generationWritten {
		if err := r.Problem(tg.AnnotationToolGeneration); err != nil {
			return nil, err
		}
		body.Tool = &toolFactsAtCall{Name: r.Tool.Name, Generation: r.Tool.Generation}
	}
	return json.Marshal(body)
}

// ContextToolCall reads, from the context object of an approval request as a provider echoes it,
// the ToolCall it was submitted for; ok is false when the context is missing or names none.
func ContextToolCall(raw json.RawMessage) (key types.NamespacedName, uid types.UID, ok bool) {
	var body requestContextBody
	if len(raw) == 0 || json.Unmarshal(raw, &body) != nil || body.ToolCall.Name == "" {
		return types.NamespacedName{}, "", false
	}
	return types.NamespacedName{Namespace: body.Namespace, Name: body.ToolCall.Name}, types.UID(body.ToolCall.UID), true
}
