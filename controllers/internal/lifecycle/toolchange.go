package lifecycle

import (
	"fmt"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// An approval, a human's or a rule's, is given for one version of the Tool: the one the ToolCall was
// accepted against. The acceptance record (Record.Tool) holds the Tool's UID and generation; the Job
// is created only from that Tool at that generation.

// ToolVersionMismatch says how tool differs from the version tc was accepted against, "" when it is
// that version. Missing or malformed annotations are a mismatch too: nothing runs on a version nobody
// recorded.
func ToolVersionMismatch(tc *tg.ToolCall, tool *tg.Tool) string {
	r := ReadRecord(tc)
	at := r.Tool
	switch {
	case !r.RecordsToolVersion():
		return fmt.Sprintf("the ToolCall does not record which version of Tool %s it was accepted against (annotations %s and %s)",
			tool.Name, tg.AnnotationToolUID, tg.AnnotationToolGeneration)
	case at.Name != "" && at.Name != tool.Name:
		// A Tool's name never changes for its UID: a record naming another is not one this controller wrote.
		return fmt.Sprintf("the ToolCall records Tool %s (annotation %s) but was accepted against Tool %s", at.Name, tg.AnnotationToolName, tool.Name)
	case at.UID != tool.UID:
		return fmt.Sprintf("Tool %s was deleted and created again after the ToolCall was accepted (UID %s, accepted against %s)", tool.Name, tool.UID, at.UID)
	case at.Generation != tool.Generation:
		return fmt.Sprintf("Tool %s was changed after the ToolCall was accepted (generation %d, accepted against %d)", tool.Name, tool.Generation, at.Generation)
	}
	return ""
}

// ToolChangeAmong says, from tools (the Tools of tc's namespace), how the Tool tc was accepted against
// changed: edited, being deleted, deleted (and perhaps created again under the toolName); "" while it
// is unchanged, or when tc records no version (which the acceptance check deals with).
func ToolChangeAmong(tc *tg.ToolCall, tools []tg.Tool) string {
	uid := ReadRecord(tc).Tool.UID
	if uid == "" {
		return ""
	}
	var other *tg.Tool // a Tool of that toolName with another UID: the accepted one was re-created
	for i := range tools {
		t := &tools[i]
		if t.Spec.ToolName != tc.Spec.Tool {
			continue
		}
		if t.UID == uid {
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
