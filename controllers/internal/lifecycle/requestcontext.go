package lifecycle

import (
	"encoding/json"
	"errors"

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
	Preview   *previewFacts    `json:"preview,omitempty"`
}

// PreviewSource is the preview's "source": the tool itself, whose claim of what the call would do
// Toolgate ran but does not verify.
const PreviewSource = "tool"

// previewFacts is what the Tool's preview said (status.preview as the manager recorded it): its
// output, a JSON value for format json and a string otherwise, with its digest and the image that
// gave it; or, for a failed preview the Tool asks a human about anyway, the error.
type previewFacts struct {
	Source  string          `json:"source"`
	Format  string          `json:"format,omitempty"`
	Output  json.RawMessage `json:"output,omitempty"`
	Digest  string          `json:"digest,omitempty"`
	Image   string          `json:"image,omitempty"`
	ImageID string          `json:"image_id,omitempty"`
	Failed  bool            `json:"failed,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// previewFactsOf renders a recorded preview; nil for none.
func previewFactsOf(p *tg.PreviewRecord) (*previewFacts, error) {
	if p == nil {
		return nil, nil
	}
	f := &previewFacts{Source: PreviewSource, Image: p.Image, ImageID: p.ImageID}
	if p.Error != "" {
		f.Failed, f.Error = true, p.Error
		return f, nil
	}
	f.Format, f.Digest = string(p.Format), p.Digest
	out, err := json.Marshal(p.Output)
	if p.Format == tg.PreviewFormatJSON {
		out, err = []byte(p.Output), nil
		if !json.Valid(out) {
			err = errors.New("status.preview.output is recorded as json but is not JSON")
		}
	}
	f.Output = out
	return f, err
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

// requestContext renders the context object of tc's approval request, accepted with record r, with
// the preview the manager recorded (nil for none).
func requestContext(tc *tg.ToolCall, r Record, preview *tg.PreviewRecord) ([]byte, error) {
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
	pf, err := previewFactsOf(preview)
	if err != nil {
		return nil, err
	}
	body.Preview = pf
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
