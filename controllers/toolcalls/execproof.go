package toolcalls

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// ExecutionKeySecret is the Secret, in the manager's namespace, that holds the key of execution
// proofs. The manager creates it when it is missing; only the manager should be able to read it.
const ExecutionKeySecret = "toolgate-execution-key"

// executionKeyField is the Secret's data key; executionKeyBytes its length.
const (
	executionKeyField = "key"
	executionKeyBytes = 32
)

// ExecutionKey signs and checks the execution proofs of the Jobs the manager creates
// (tg.AnnotationExecutionProof). The Job's name follows from the ToolCall, which anyone who may read
// ToolCalls knows, so whoever may create Jobs could create it first; the proof is what they cannot
// make. The key is read once (created when missing) and kept.
type ExecutionKey struct {
	// Client creates the Secret; Reader reads it from the apiserver.
	Client client.Client
	Reader client.Reader
	// Namespace is the manager's namespace, where the Secret is.
	Namespace string

	mu  sync.Mutex
	key []byte
	// since is when the key was made: Jobs older than it were created before the manager signed any.
	since metav1.Time
}

// load returns the key, reading the Secret (and creating it, with a random key, when missing) on
// first use.
func (k *ExecutionKey) load(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	key := types.NamespacedName{Namespace: k.Namespace, Name: ExecutionKeySecret}
	s := &corev1.Secret{}
	err := k.Reader.Get(ctx, key, s)
	if apierrors.IsNotFound(err) {
		fresh := make([]byte, executionKeyBytes)
		if _, err := rand.Read(fresh); err != nil {
			return nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: ExecutionKeySecret,
				Labels: map[string]string{"app.kubernetes.io/name": "toolgate", "app.kubernetes.io/component": "execution-key"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{executionKeyField: fresh},
		}
		err = k.Client.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			// Another replica created it first: its key is the one.
			err = k.Reader.Get(ctx, key, s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the execution key (Secret %s): %w", key, err)
	}
	v := s.Data[executionKeyField]
	if len(v) < executionKeyBytes {
		return nil, fmt.Errorf("the execution key, Secret %s, holds %d bytes under %q; it needs at least %d: delete the Secret and the manager makes a new one (Jobs it created under the old key are then no longer recognised)",
			key, len(v), executionKeyField, executionKeyBytes)
	}
	k.key, k.since = v, s.CreationTimestamp
	return v, nil
}

// keyRetry bounds the wait between two tries to make or read the key at start.
var keyRetry = wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: time.Minute}

// Start makes (or reads) the key as soon as the manager leads, before any call is approved, so that
// the time the key was made (since) is when this manager first ran: a Job without a proof is the
// call's only if an older manager made it, never one made while this one runs (made in advance, it
// would otherwise count as older than a key made at the first approval). A key that cannot be made
// yet (the namespace missing, Secrets refused) is tried again, with its error in the log, and Jobs
// are not created meanwhile.
func (k *ExecutionKey) Start(ctx context.Context) error {
	// The wait ends when the key is made or the manager stops; either way the manager goes on.
	_ = wait.ExponentialBackoffWithContext(ctx, keyRetry, func(ctx context.Context) (bool, error) {
		if _, err := k.load(ctx); err != nil {
			logf.FromContext(ctx).Error(err, "the execution key cannot be made yet; approved calls wait for it", "namespace", k.Namespace)
			return false, nil
		}
		return true, nil
	})
	return nil
}

// proof is the MAC of one Job of one ToolCall, started by decision (the Job's decision annotation).
func proof(key []byte, namespace, jobName string, toolCall types.UID, decision string) string {
	m := hmac.New(sha256.New, key)
	// NUL never occurs in a namespace, a name, a UID or JSON text, so the fields cannot run into
	// each other.
	fmt.Fprintf(m, "toolgate.dev/execution-proof/v1\x00%s\x00%s\x00%s\x00%s", namespace, jobName, toolCall, decision)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Sign records on the Job the decision that starts it and sets its execution proof for tc.
func (k *ExecutionKey) Sign(ctx context.Context, job *batchv1.Job, tc *tg.ToolCall) error {
	key, err := k.load(ctx)
	if err != nil {
		return err
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	if d := tc.Status.Decision; d != nil {
		kept := *d
		kept.Note = ""
		raw, err := json.Marshal(kept)
		if err != nil {
			return err
		}
		job.Annotations[tg.AnnotationJobDecision] = string(raw)
	}
	job.Annotations[tg.AnnotationExecutionProof] = proof(key, job.Namespace, job.Name, tc.UID, job.Annotations[tg.AnnotationJobDecision])
	return nil
}

// startedBy is the decision recorded on a Job the manager created (Created), nil when it has none.
func startedBy(job *batchv1.Job) *tg.Decision {
	raw, ok := job.Annotations[tg.AnnotationJobDecision]
	if !ok {
		return nil
	}
	d := &tg.Decision{}
	if err := json.Unmarshal([]byte(raw), d); err != nil {
		return nil
	}
	return d
}

// Created reports whether the manager created job for tc: its execution proof is valid. A Job
// without a proof that the apiserver created before the key existed was made by a manager that did
// not sign its Jobs yet (an upgrade): it is taken as the call's, as it was then; nobody can create a
// Job in the past.
func (k *ExecutionKey) Created(ctx context.Context, job *batchv1.Job, tc *tg.ToolCall) (bool, error) {
	key, err := k.load(ctx)
	if err != nil {
		return false, err
	}
	got, signed := job.Annotations[tg.AnnotationExecutionProof]
	if !signed && job.CreationTimestamp.Before(&k.since) {
		return true, nil
	}
	want := proof(key, job.Namespace, job.Name, tc.UID, job.Annotations[tg.AnnotationJobDecision])
	return hmac.Equal([]byte(got), []byte(want)), nil
}

// madeFromTemplate reports whether pod is one the Job controller made from job's template, as far as
// what runs goes: every container and init container of the template is in the Pod with the same
// image, command, arguments, working directory and env sources, its env variables and volume mounts
// among the Pod's, and the template's volumes among the Pod's with the same sources. Admission may
// add to a Pod (a ServiceAccount token, an injected sidecar, resources), so additions are allowed;
// nothing of the template may differ. A Pod that someone else created with the Job's selector labels
// or owner reference, running anything else, fails it.
func madeFromTemplate(job *batchv1.Job, pod *corev1.Pod) bool {
	tmpl, got := &job.Spec.Template.Spec, &pod.Spec
	if tmpl.ServiceAccountName != "" && tmpl.ServiceAccountName != got.ServiceAccountName {
		return false
	}
	return sameContainers(tmpl.InitContainers, got.InitContainers) && sameContainers(tmpl.Containers, got.Containers) &&
		subset(tmpl.Volumes, got.Volumes, func(v corev1.Volume) string { return v.Name })
}

// runsTemplateImages reports whether every container and init container of job's template is in pod,
// under its name, with the same image: what a Pod's cached copy (SlimPod) still tells of it.
func runsTemplateImages(job *batchv1.Job, pod *corev1.Pod) bool {
	same := func(want, got []corev1.Container) bool {
		for _, w := range want {
			if !slices.ContainsFunc(got, func(g corev1.Container) bool { return g.Name == w.Name && g.Image == w.Image }) {
				return false
			}
		}
		return true
	}
	tmpl := &job.Spec.Template.Spec
	return same(tmpl.InitContainers, pod.Spec.InitContainers) && same(tmpl.Containers, pod.Spec.Containers)
}

func sameContainers(want, got []corev1.Container) bool {
	for _, w := range want {
		i := slices.IndexFunc(got, func(c corev1.Container) bool { return c.Name == w.Name })
		if i < 0 {
			return false
		}
		g := got[i]
		if w.Image != g.Image || !slices.Equal(w.Command, g.Command) || !slices.Equal(w.Args, g.Args) || w.WorkingDir != g.WorkingDir ||
			!equality.Semantic.DeepEqual(w.EnvFrom, g.EnvFrom) ||
			!subset(w.Env, g.Env, func(e corev1.EnvVar) string { return e.Name }) ||
			!subset(w.VolumeMounts, g.VolumeMounts, func(m corev1.VolumeMount) string { return m.MountPath }) {
			return false
		}
	}
	return true
}

// subset reports whether every item of want is in got, equal, found by its key.
func subset[T any](want, got []T, key func(T) string) bool {
	for _, w := range want {
		i := slices.IndexFunc(got, func(g T) bool { return key(g) == key(w) })
		if i < 0 || !equality.Semantic.DeepEqual(w, got[i]) {
			return false
		}
	}
	return true
}
