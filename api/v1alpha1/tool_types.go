package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultExecutionTimeout is the Tool's execution timeout when spec.executionTimeout is not set.
const DefaultExecutionTimeout = "5m"

// ToolSpec describes how a tool is executed once a human approved a call to it.
type ToolSpec struct {
	// toolName is the name agents and approvers see, e.g. issue_refund. At most one Tool per namespace
	// may carry a given toolName.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +required
	ToolName string `json:"toolName"`

	// jobTemplate is the Job that executes the tool. The controller adds the env TOOL_NAME,
	// TOOL_ARGUMENTS (JSON), TOOLCALL_NAME and TOOLCALL_UID to every container. It carries the full
	// Job schema, so the apiserver refuses a malformed template when the Tool is written (CRD
	// descriptions are left out, `crd:maxDescLen=0`, to keep the CRD small enough for client-side apply).
	// +required
	JobTemplate batchv1.JobTemplateSpec `json:"jobTemplate"`

	// executionTimeout bounds how long the tool may run; it becomes the Job's activeDeadlineSeconds
	// (further capped by what is left of the caller's waiting limit).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="executionTimeout must be a positive duration such as 90s, 5m or 1h30m"
	// +kubebuilder:default="5m"
	// +optional
	ExecutionTimeout *metav1.Duration `json:"executionTimeout,omitempty"`

	// argumentsSchema is a JSON Schema (draft 2020-12 unless $schema says otherwise) that a ToolCall's
	// arguments must satisfy before any human is asked.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	ArgumentsSchema *apiextensionsv1.JSON `json:"argumentsSchema,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=toolgate
// +kubebuilder:printcolumn:name="Tool Name",type=string,JSONPath=`.spec.toolName`
// +kubebuilder:printcolumn:name="Execution Timeout",type=string,JSONPath=`.spec.executionTimeout`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Tool tells Toolgate how to execute one tool in this namespace.
type Tool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ToolSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// ToolList contains a list of Tool.
type ToolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Tool{}, &ToolList{})
}
