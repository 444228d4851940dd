package controllers

import (
	"fmt"
	"strconv"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// An approval, a human's or a rule's, is given for one version of the Tool: the one the ToolCall was
// accepted against. Acceptance records the Tool's UID and generation; the Job is created only from
// that Tool at that generation. A Tool edited (a new generation) or deleted and created again (a new
// UID) after acceptance ends the call without running it.

// recordToolVersion writes the Tool's identity into the acceptance record.
func recordToolVersion(tc *tg.ToolCall, tool *tg.Tool) {
	tc.Annotations[tg.AnnotationToolUID] = string(tool.UID)
	tc.Annotations[tg.AnnotationToolGeneration] = strconv.FormatInt(tool.Generation, 10)
}

// toolVersionProblem says how the Tool differs from the version the ToolCall was accepted against,
// "" when it is that version. Missing or malformed annotations are a problem too: nothing runs on a
// version nobody recorded.
func toolVersionProblem(tc *tg.ToolCall, tool *tg.Tool) string {
	uid, okUID := tc.Annotations[tg.AnnotationToolUID]
	gen, errGen := strconv.ParseInt(tc.Annotations[tg.AnnotationToolGeneration], 10, 64)
	switch {
	case !okUID || errGen != nil:
		return fmt.Sprintf("the ToolCall does not record which version of Tool %s it was accepted against (annotations %s and %s)",
			tool.Name, tg.AnnotationToolUID, tg.AnnotationToolGeneration)
	case uid != string(tool.UID):
		return fmt.Sprintf("Tool %s was deleted and created again after the ToolCall was accepted (UID %s, accepted against %s)", tool.Name, tool.UID, uid)
	case gen != tool.Generation:
		return fmt.Sprintf("Tool %s was changed after the ToolCall was accepted (generation %d, accepted against %d)", tool.Name, tool.Generation, gen)
	}
	return ""
}

// checkToolVersion is checkAcceptance's check that the Tool is still the accepted version: a record
// without the version is not one this controller writes; a record of another version is a Tool that
// changed before the request was submitted (again).
func checkToolVersion(tc *tg.ToolCall, tool *tg.Tool) *rejection {
	for _, key := range []string{tg.AnnotationToolUID, tg.AnnotationToolGeneration} {
		if _, ok := tc.Annotations[key]; !ok {
			return notAccepted(fmt.Sprintf("annotation %s is missing (the controller writes it together with the finalizer)", key))
		}
	}
	if problem := toolVersionProblem(tc, tool); problem != "" {
		return &rejection{tg.ReasonToolChanged, "The call could not be put to a human: " + problem +
			"; an approval would cover the accepted version only. Create the ToolCall again to run it with the Tool as it is now. The call did not run."}
	}
	return nil
}

// toolChanged is the outcome of an approved call whose Tool is no longer the accepted version.
func toolChanged(problem string) *notStarted {
	return &notStarted{tg.PhaseFailed, tg.ReasonToolChanged,
		"The call was approved but could not start: " + problem + "; the approval covers the accepted version only. Create the ToolCall again to run it with the Tool as it is now. The call did not run."}
}
