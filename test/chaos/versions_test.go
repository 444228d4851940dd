package chaos

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// versionEnv marks each version of a Tool's Job template (an env var of its container), so that a Job
// says which version of the Tool it was built from independently of what the controller records.
const versionEnv = "CHAOS_TOOL_VERSION"

// templateMark is the mark of a Job template; "" when it has none.
func templateMark(spec *corev1.PodSpec) string {
	for _, e := range spec.Containers[0].Env {
		if e.Name == versionEnv {
			return e.Value
		}
	}
	return ""
}

// setMark sets the mark of a Job template.
func setMark(spec *corev1.PodSpec, mark string) {
	c := &spec.Containers[0]
	for i := range c.Env {
		if c.Env[i].Name == versionEnv {
			c.Env[i].Value = mark
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: versionEnv, Value: mark})
}

// toolVersions follows the Tools' edits: for each Tool, the template mark of each generation, and
// when each edit was made.
type toolVersions struct {
	mu    sync.Mutex
	marks map[string]map[int64]string // Tool name -> generation -> mark
	// editedAt: Tool name -> the times of its edits, in order. An edit's time is taken just before it
	// is sent, so that it is never later than the edit itself.
	editedAt map[string][]time.Time
	edits    int
}

func newToolVersions() *toolVersions {
	return &toolVersions{marks: map[string]map[int64]string{}, editedAt: map[string][]time.Time{}}
}

// mark gives a new Tool's template its first mark.
func (v *toolVersions) mark(t *tg.Tool) {
	setMark(&t.Spec.JobTemplate.Spec.Template.Spec, t.Name+"-1")
}

// record remembers the mark of the Tool's current generation.
func (v *toolVersions) record(t *tg.Tool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.marks[t.Name] == nil {
		v.marks[t.Name] = map[int64]string{}
	}
	v.marks[t.Name][t.Generation] = templateMark(&t.Spec.JobTemplate.Spec.Template.Spec)
}

// edit changes the Tool's Job template (a new mark, so a new generation) and records it.
func (v *toolVersions) edit(ctx context.Context, h *th.Harness, name string) {
	t := &tg.Tool{}
	if err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: name}, t); err != nil {
		return
	}
	v.mu.Lock()
	v.edits++
	n := v.edits
	v.mu.Unlock()
	setMark(&t.Spec.JobTemplate.Spec.Template.Spec, fmt.Sprintf("%s-%d", name, n+1))
	at := time.Now()
	if err := h.K8s.Update(ctx, t); err != nil {
		return // a conflict: the next edit tries again
	}
	v.record(t)
	v.mu.Lock()
	v.editedAt[name] = append(v.editedAt[name], at)
	v.mu.Unlock()
}

// firstEditAfter is when Tool name was first edited after t, zero if it was not.
func (v *toolVersions) firstEditAfter(name string, t time.Time) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, at := range v.editedAt[name] {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// check says what is wrong with the version a Job was built from: its template must be the one of the
// generation the Job names, which must be the generation its ToolCall (when it still exists) was
// accepted against.
func (v *toolVersions) check(j batchv1.Job, tc *tg.ToolCall, tcExists bool) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	gen, err := strconv.ParseInt(j.Annotations[tg.AnnotationToolGeneration], 10, 64)
	if err != nil {
		return fmt.Sprintf("Job %s does not say which generation of the Tool it was built from", j.Name)
	}
	mark := templateMark(&j.Spec.Template.Spec)
	var tool string
	for name, marks := range v.marks {
		for _, m := range marks {
			if m == mark {
				tool = name
			}
		}
	}
	if want, ok := v.marks[tool][gen]; !ok || want != mark {
		return fmt.Sprintf("Job %s was built from template %q, which is not generation %d of Tool %s (%q)", j.Name, mark, gen, tool, want)
	}
	if tcExists && tc.Annotations[tg.AnnotationToolGeneration] != strconv.FormatInt(gen, 10) {
		return fmt.Sprintf("Job %s was built from generation %d, the ToolCall was accepted against %s", j.Name, gen, tc.Annotations[tg.AnnotationToolGeneration])
	}
	return ""
}
