// Package toolcall is the Go client for agents (and their harnesses) that ask Toolgate to run a tool:
// it creates a ToolCall and waits for its outcome with a watch on that one object, never by polling.
//
// The identity it runs as needs only the toolgate-toolcall-agent ClusterRole (create, get, list,
// watch and delete on toolcalls) bound in the namespace it works in.
package toolcall

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// DeleteTimeout bounds the deletion Call makes when its context ends before the outcome: the
// context is already done, so the deletion runs on a context of its own.
const DeleteTimeout = 10 * time.Second

// Client creates ToolCalls and waits for their outcome with a watch (never by polling).
type Client struct {
	c         client.WithWatch
	namespace string
}

// New returns a Client working in namespace through c. c's scheme must know the toolgate.dev/v1alpha1
// types (NewForConfig builds such a client).
func New(c client.WithWatch, namespace string) *Client {
	return &Client{c: c, namespace: namespace}
}

// NewForConfig returns a Client for the cluster cfg points at, working in namespace.
func NewForConfig(cfg *rest.Config, namespace string) (*Client, error) {
	if cfg == nil {
		return nil, errors.New("toolcall: the rest.Config is nil: pass one, e.g. from sigs.k8s.io/controller-runtime's ctrl.GetConfig()")
	}
	if namespace == "" {
		return nil, errors.New("toolcall: namespace is empty: name the namespace the ToolCalls are created in")
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("toolcall: building a client for %s: %w", cfg.Host, err)
	}
	return New(c, namespace), nil
}

// Scheme returns a scheme holding the toolgate.dev/v1alpha1 types, for callers that build their own
// client.WithWatch for New.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := tg.AddToScheme(s); err != nil {
		panic(err) // only on a programming error in the API package
	}
	return s
}

// Namespace is the namespace the Client works in.
func (c *Client) Namespace() string { return c.namespace }

// Options are the optional parts of a call.
type Options struct {
	// Timeout is spec.timeout, the approval timeout requested from the provider; 0 lets the
	// controller choose the largest that fits in the waiting limit.
	Timeout time.Duration
	// Reason is spec.reason: the agent's own explanation of the call, shown to approvers as the
	// agent's claim (at most 4 KiB). Optional.
	Reason string
	// Name is the ToolCall's exact name; "" lets the apiserver generate one from the tool's name
	// ("<tool>-" followed by five random characters).
	Name string
	// Labels are put on the ToolCall.
	Labels map[string]string
	// Progress is called with the ToolCall on every observed change (including the created object
	// and the final one), for live output. It runs on the waiting goroutine: keep it short.
	Progress func(*tg.ToolCall)
}

// Result is what a call produced. On errors other than *Error it may be partial or nil.
type Result struct {
	// Name is the ToolCall's name.
	Name string
	// Output is status.result: the Job's termination message (at most 4 KiB).
	Output string
	// JobName is the Job that executed the tool, if one was created.
	JobName string
	// ToolCall is the last observed object (the final one when the call ended).
	ToolCall *tg.ToolCall
}

func resultOf(tc *tg.ToolCall) *Result {
	if tc == nil {
		return nil
	}
	return &Result{Name: tc.Name, Output: tc.Status.Result, JobName: tc.Status.JobName, ToolCall: tc}
}

// Call creates the ToolCall and blocks until it reaches a terminal phase. Succeeded returns
// (*Result, nil). Any other terminal phase returns a partial *Result and an *Error. If ctx ends
// first, the ToolCall is deleted (so Toolgate cancels a pending approval request, or deletes a
// running Job) and an *AbandonedError wrapping ctx.Err() is returned with the last observed state.
//
// Call adds no deadline of its own: the controller ends every ToolCall by its waiting limit, but if
// the controller may not be running, give ctx a deadline a little past waitingLimit.
func (c *Client) Call(ctx context.Context, tool string, args any, waitingLimit time.Duration, o Options) (*Result, error) {
	tc, err := c.Create(ctx, tool, args, waitingLimit, o)
	if err != nil {
		return nil, err
	}
	if o.Progress != nil {
		o.Progress(tc.DeepCopy())
	}
	res, err := c.watch(ctx, tc, o.Progress)
	if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return res, err
	}
	last := tc
	if res != nil && res.ToolCall != nil {
		last = res.ToolCall
	}
	ab := &AbandonedError{Name: tc.Name, Namespace: c.namespace, Phase: last.Status.Phase, Err: ctx.Err()}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DeleteTimeout)
	defer cancel()
	switch derr := c.delete(dctx, tc.Name, tc.UID); {
	case derr == nil:
		ab.Deleted = true
	case apierrors.IsNotFound(derr) || apierrors.IsConflict(derr):
		// Already gone (or replaced by another object of the same name): nothing left to abandon.
		ab.Deleted = true
	default:
		ab.DeleteErr = derr
	}
	return resultOf(last), ab
}

// Create validates the arguments and creates the ToolCall; it does not wait. Arguments given as
// json.RawMessage or []byte are sent as they are; anything else is encoded with json.Marshal. They
// must form a JSON object: otherwise an error naming arguments is returned and nothing is created.
func (c *Client) Create(ctx context.Context, tool string, args any, waitingLimit time.Duration, o Options) (*tg.ToolCall, error) {
	tc, err := c.build(tool, args, waitingLimit, o)
	if err != nil {
		return nil, err
	}
	if err := c.c.Create(ctx, tc); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("toolcall: a ToolCall named %q already exists in namespace %q: choose another Options.Name, leave it empty for a generated one, or Wait for the existing one: %w", o.Name, c.namespace, err)
		}
		return nil, fmt.Errorf("toolcall: creating the ToolCall for tool %q in namespace %q: %w", tool, c.namespace, err)
	}
	return tc, nil
}

func (c *Client) build(tool string, args any, waitingLimit time.Duration, o Options) (*tg.ToolCall, error) {
	if tool == "" {
		return nil, errors.New("toolcall: tool is empty: pass the toolName of a Tool in the namespace")
	}
	if waitingLimit <= 0 {
		return nil, fmt.Errorf("toolcall: waitingLimit is %v: pass how long the caller will wait in total, e.g. 2*time.Minute", waitingLimit)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("toolcall: Options.Timeout is %v: pass 0 to let the controller choose, or a positive approval timeout", o.Timeout)
	}
	if len(o.Reason) > tg.MaxReasonBytes {
		return nil, fmt.Errorf("toolcall: Options.Reason is %d bytes: shorten it to at most %d bytes (4 KiB)", len(o.Reason), tg.MaxReasonBytes)
	}
	raw, err := Arguments(args)
	if err != nil {
		return nil, err
	}
	tc := &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: o.Name, Labels: o.Labels},
		Spec: tg.ToolCallSpec{
			Tool:         tool,
			Arguments:    runtime.RawExtension{Raw: raw},
			WaitingLimit: metav1.Duration{Duration: waitingLimit},
			Reason:       o.Reason,
		},
	}
	if o.Name == "" {
		tc.GenerateName = GenerateName(tool)
	}
	if o.Timeout > 0 {
		tc.Spec.Timeout = &metav1.Duration{Duration: o.Timeout}
	}
	return tc, nil
}

// Wait waits for an existing ToolCall (e.g. one created before the agent restarted) to reach a
// terminal phase, with the same results as Call. progress (may be nil) is called with the object as
// first read and on every observed change. Unlike Call, Wait never deletes the ToolCall: when ctx
// ends first it returns the last observed state and an error wrapping ctx.Err().
func (c *Client) Wait(ctx context.Context, name string, progress func(*tg.ToolCall)) (*Result, error) {
	tc, err := c.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if progress != nil {
		progress(tc.DeepCopy())
	}
	return c.watch(ctx, tc, progress)
}

// Delete deletes the ToolCall, abandoning it: Toolgate cancels its approval request if one may still
// be pending, and a running Job is deleted with it. A ToolCall that is already gone is not an error.
func (c *Client) Delete(ctx context.Context, name string) error {
	err := c.delete(ctx, name, "")
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func (c *Client) delete(ctx context.Context, name string, uid types.UID) error {
	tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: name}}
	var opts []client.DeleteOption
	if uid != "" {
		// Never delete a newer ToolCall that took the same name.
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	if err := c.c.Delete(ctx, tc, opts...); err != nil {
		return fmt.Errorf("toolcall: deleting ToolCall %s/%s: %w", c.namespace, name, err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, name string) (*tg.ToolCall, error) {
	tc := &tg.ToolCall{}
	if err := c.c.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: name}, tc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("toolcall: no ToolCall %q in namespace %q: check the name and the namespace: %w", name, c.namespace, err)
		}
		return nil, fmt.Errorf("toolcall: reading ToolCall %s/%s: %w", c.namespace, name, err)
	}
	return tc, nil
}
