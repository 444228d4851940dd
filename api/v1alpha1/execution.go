package v1alpha1

// The execution record: a ToolCall's Job is the record that its tool ran, so the manager takes as that
// record only a Job it can show it created, and reads the run's outcome only from Pods made from that
// Job's template.
const (
	// AnnotationExecutionProof is set by the manager on every Job it creates: a MAC, under a key only
	// the manager reads (the Secret toolgate-execution-key in its namespace), of the Job's namespace,
	// its name and the UID of the ToolCall it runs. A Job under a call's name without a valid proof
	// was made by someone else and never becomes the call's record.
	AnnotationExecutionProof = "toolgate.dev/execution-proof"

	// ReasonForeignJob: a Job under the name of the call's Job was not created by Toolgate (it carries
	// no valid execution proof). Before the start the call ends Failed without running; a Job of a
	// running call that was replaced by such a Job ends it Failed, its outcome unknown.
	ReasonForeignJob = "ForeignJob"
	// ReasonForeignPod: a Pod that the call's Job counts was not made from the Job's template (someone
	// else created it, with the Job's selector labels or its owner reference): the Job's outcome
	// cannot be trusted, so the call ends Failed, its outcome unknown.
	ReasonForeignPod = "ForeignPod"
)
