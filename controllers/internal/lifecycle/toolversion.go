package lifecycle

import (
	"fmt"
	"strconv"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// An approval, a human's or a rule's, is given for one version of the Tool: the one the ToolCall was
// accepted against. Acceptance records the Tool's UID and generation; the Job is created only from
// that Tool at that generation.

// RecordToolVersion writes the Tool's identity into the acceptance record (tc's annotations, which
// the caller has made).
func RecordToolVersion(tc *tg.ToolCall, tool *tg.Tool) {
	tc.Annotations[tg.AnnotationToolUID] = string(tool.UID)
	tc.Annotations[tg.AnnotationToolGeneration] = strconv.FormatInt(tool.Generation, 10)
	tc.Annotations[tg.AnnotationToolName] = tool.Name
}

// ToolVersionMismatch says how tool differs from the version tc was accepted against, "" when it is
// that version. Missing or malformed annotations are a mismatch too: nothing runs on a version nobody
// recorded.
func ToolVersionMismatch(tc *tg.ToolCall, tool *tg.Tool) string {
	uid, okUID := tc.Annotations[tg.AnnotationToolUID]
	gen, errGen := strconv.ParseInt(tc.Annotations[tg.AnnotationToolGeneration], 10, 64)
	switch {
	case !okUID || errGen != nil:
		return fmt.Sprintf("the ToolCall does not record which version of Tool %s it was accepted against (annotations %s and %s)",
			tool.Name, tg.AnnotationToolUID, tg.AnnotationToolGeneration)
	case tc.Annotations[tg.AnnotationToolName] != "" && tc.Annotations[tg.AnnotationToolName] != tool.Name:
		// A Tool's name never changes for its UID: a record naming another is not one this controller wrote.
		return fmt.Sprintf("the ToolCall records Tool %s (annotation %s) but was accepted against Tool %s", tc.Annotations[tg.AnnotationToolName], tg.AnnotationToolName, tool.Name)
	case uid != string(tool.UID):
		return fmt.Sprintf("Tool %s was deleted and created again after the ToolCall was accepted (UID %s, accepted against %s)", tool.Name, tool.UID, uid)
	case gen != tool.Generation:
		return fmt.Sprintf("Tool %s was changed after the ToolCall was accepted (generation %d, accepted against %d)", tool.Name, tool.Generation, gen)
	}
	return ""
}

// ToolChangeAmong says, from tools (the Tools of tc's namespace), how the Tool tc was accepted against
// changed: edited, being deleted, deleted (and perhaps created again under the toolName); "" while it
// is unchanged, or when tc records no version (which the acceptance check deals with).
func ToolChangeAmong(tc *tg.ToolCall, tools []tg.Tool) string {
	uid := tc.Annotations[tg.AnnotationToolUID]
	if uid == "" {
		return ""
	}
	var other *tg.Tool // a Tool of that toolName with another UID: the accepted one was re-created
	for i := range tools {
		t := &tools[i]
		if t.Spec.ToolName != tc.Spec.Tool {
			continue
		}
		if string(t.UID) == uid {
			if !t.DeletionTimestamp.IsZero() {
				return fmt.Sprintf("Tool %s is being deleted", t.Name)
			}
			return ToolVersionMismatch(tc, t)
		}
		if other == nil {
			other = t
		}
	}
	if other != nil {
		return ToolVersionMismatch(tc, other)
	}
	return fmt.Sprintf("the Tool with toolName %s that the ToolCall was accepted against was deleted", tc.Spec.Tool)
}
