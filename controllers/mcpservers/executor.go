package mcpservers

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
)

// How the calls' Pods run: the executor's image, its resources and where it is scheduled. All of it
// comes from the MCPServer's spec and the manager's flags, never from what the server sends.

// FlagExecutorImage is the manager's flag that sets Options.ExecutorImage.
const FlagExecutorImage = "mcp-executor-image"

// executor is what the Job of each call of an MCPServer's Tools runs with.
type executor struct {
	image string
	spec  tg.MCPExecutor
}

// CheckImage refuses an image reference that is not one, saying where it came from (what).
func CheckImage(what, image string) error {
	if _, err := name.ParseReference(image); err != nil {
		return fmt.Errorf("%s %q is not an image reference (%v): give one such as registry.example.com/toolgate/mcp-call:v0.1.0", what, image, err)
	}
	return nil
}

// executorOf is the executor of srv's calls: spec.executor, with its image from spec.executor.image,
// else the deprecated spec.executorImage, else the manager's default. A Stalled *readiness.Error says
// what to set when there is no image, or not a valid one.
func executorOf(srv *tg.MCPServer, defaultImage string) (executor, error) {
	e := executor{spec: *srv.Spec.Executor.DeepCopy()}
	what := "spec.executor.image"
	switch {
	case srv.Spec.Executor.Image != "":
		e.image = srv.Spec.Executor.Image
	case srv.Spec.ExecutorImage != "":
		e.image, what = srv.Spec.ExecutorImage, "spec.executorImage"
	case defaultImage != "":
		e.image, what = defaultImage, "the manager's --"+FlagExecutorImage
	default:
		return e, readiness.Stalledf(tg.ReasonInvalidMCPServerSpec,
			"spec.executor.image is not set and the manager has no default executor image: set spec.executor.image to Toolgate's mcp-call image, such as registry.example.com/toolgate/mcp-call:v0.1.0, or start the manager with --%s (the chart sets it)", FlagExecutorImage)
	}
	if err := CheckImage(what, e.image); err != nil {
		return e, readiness.Stalledf(tg.ReasonInvalidMCPServerSpec, "%s", err.Error())
	}
	return e, nil
}

// resources are the executor container's requests and limits: spec.executor.resources as given, or
// the defaults when it is not set.
func (e executor) resources() corev1.ResourceRequirements {
	r := e.spec.Resources
	if r == nil {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(tg.DefaultExecutorCPURequest),
				corev1.ResourceMemory: resource.MustParse(tg.DefaultExecutorMemoryRequest),
			},
			Limits: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(tg.DefaultExecutorCPULimit),
				corev1.ResourceMemory: resource.MustParse(tg.DefaultExecutorMemoryLimit),
			},
		}
	}
	return corev1.ResourceRequirements{Requests: r.Requests.DeepCopy(), Limits: r.Limits.DeepCopy()}
}

// schedule sets the Pod's pull secrets and scheduling from spec.executor.
func (e executor) schedule(pod *corev1.PodSpec) {
	s := e.spec.DeepCopy()
	pod.ImagePullSecrets = s.ImagePullSecrets
	pod.NodeSelector = s.NodeSelector
	pod.Tolerations = s.Tolerations
	pod.Affinity = s.Affinity
	pod.PriorityClassName = s.PriorityClassName
}
