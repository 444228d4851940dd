package toolcalls_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// The windows in which a manager can die between two of its writes, each named by what it has done
// and what it has not yet written.
const (
	// afterSubmit: the provider holds the request; the status that records it is not written.
	afterSubmit = "after-submit"
	// beforeJobCreate: the approval is applied in memory; the Job is not created.
	beforeJobCreate = "before-job-create"
	// afterJobCreate: the Job exists; the status that says so is not written.
	afterJobCreate = "after-job-create"
)

// errKilled is what a dead manager's writes fail with.
var errKilled = errors.New("the manager process was killed")

// crashAt makes the next manager h starts die in window, as a killed process would: the manager's
// client fails the write that ends the window (or, after the Job create, the answer to it) and every
// write after it, so nothing the crash left unwritten is written by a retried reconcile. The channel
// is closed when the manager dies. h.Restart starts a manager that lives.
func crashAt(h *th.Harness, window string) <-chan struct{} {
	died := make(chan struct{})
	var once sync.Once
	var dead atomic.Bool
	die := func() {
		dead.Store(true)
		once.Do(func() { close(died) })
	}
	writing := func() error {
		if dead.Load() {
			return errKilled
		}
		return nil
	}
	funcs := interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := writing(); err != nil {
				return err
			}
			if _, job := obj.(*batchv1.Job); !job || dryRun(opts) {
				return c.Create(ctx, obj, opts...)
			}
			switch window {
			case beforeJobCreate:
				die()
				return errKilled
			case afterJobCreate:
				if err := c.Create(ctx, obj, opts...); err != nil {
					return err
				}
				die()
				return errKilled
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := writing(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := writing(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := writing(); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := writing(); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := writing(); err != nil {
				return err
			}
			if tc, ok := obj.(*tg.ToolCall); ok && window == afterSubmit && tc.Status.RequestID != "" {
				// The first status write that records the submitted request.
				die()
				return errKilled
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if err := writing(); err != nil {
				return err
			}
			return c.Apply(ctx, obj, opts...)
		},
	}
	h.NewClient = func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, o)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(c, funcs), nil
	}
	return died
}

func dryRun(opts []client.CreateOption) bool {
	o := &client.CreateOptions{}
	o.ApplyOptions(opts)
	return len(o.DryRun) > 0
}

// A ToolCall deleted just as it is accepted can be removed by the apiserver despite the finalizer the
// acceptance added (the deletion checked for finalizers before the acceptance's patch landed). The
// status write that records the submitted request then finds it gone: the request is withdrawn, so no
// human reviews a call nobody waits for. Here the ToolCall is removed (its finalizer stripped) between
// the submission and that status write.
func TestRequestOfAToolCallGoneAtAcceptanceIsWithdrawn(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	var removed atomic.Bool
	// The removal reads and writes the ToolCall around the cache: the cache may not have seen the
	// acceptance's patch of this very reconcile yet.
	interceptWithLive(h, func(live client.Client) interceptor.Funcs {
		return interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if tc, ok := obj.(*tg.ToolCall); ok && tc.Status.RequestID != "" && !removed.Load() {
					key := client.ObjectKeyFromObject(tc)
					if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
						gone := &tg.ToolCall{}
						if err := live.Get(ctx, key, gone); err != nil {
							return err
						}
						gone.Finalizers = nil
						return live.Update(ctx, gone)
					}); err != nil {
						return err
					}
					if err := live.Delete(ctx, tc); client.IgnoreNotFound(err) != nil {
						return err
					}
					removed.Store(true)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}
	})
	h.Start()
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	// The flag is set just after the removal returns, so the test may see the ToolCall gone first.
	g.Eventually(removed.Load).WithTimeout(20*time.Second).Should(BeTrue(), "the ToolCall was removed between its submission and the status write")
	h.WaitGone("refund", 20*time.Second)
	var all []provider.Request
	g.Eventually(func(g Gomega) {
		var err error
		all, err = h.Provider.List("")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(all).To(HaveLen(1))
		g.Expect(all[0].Status).To(Equal(provider.StatusCancelled))
	}).Should(Succeed())
	g.Expect(h.Jobs()).To(BeEmpty())
}

// A write that lands between a call's status write and the removal of its finalizer (in asynchronous
// mode, the receiver recording a notification while the call starts) makes the removal conflict. The
// reconcile that write brings removes the finalizer, and no reconcile is counted as failed.
func TestFinalizerRemovalAfterAConcurrentWriteIsNotAFailure(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	var touched atomic.Int64
	interceptWithLive(h, func(live client.Client) interceptor.Funcs {
		return interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if tc, ok := obj.(*tg.ToolCall); ok && tc.Status.Phase == tg.PhaseRunning && !controllerutil.ContainsFinalizer(tc, tg.Finalizer) && touched.Load() == 0 {
					// Another writer changes the ToolCall first.
					other := &tg.ToolCall{}
					if err := live.Get(ctx, client.ObjectKeyFromObject(tc), other); err != nil {
						return err
					}
					metav1.SetMetaDataAnnotation(&other.ObjectMeta, "example.com/touched", "yes")
					if err := live.Update(ctx, other); err != nil {
						return err
					}
					touched.Add(1)
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
		}
	})
	h.Start()
	failed := th.MetricValue("controller_runtime_reconcile_errors_total", map[string]string{"controller": "toolcall"})
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	g.Eventually(func(g Gomega) {
		tc := h.Get("refund")
		g.Expect(tc.Status.Phase).To(Equal(tg.PhaseRunning))
		g.Expect(tc.Finalizers).To(BeEmpty())
	}).Should(Succeed())
	g.Expect(touched.Load()).To(BeEquivalentTo(1), "a write landed before the finalizer's removal")
	g.Expect(th.MetricValue("controller_runtime_reconcile_errors_total", map[string]string{"controller": "toolcall"})).To(Equal(failed))
}

// interceptWithLive builds the next manager's client wrapped with the interceptor functions fns
// returns for live, a client that reads and writes around the manager's cache.
func interceptWithLive(h *th.Harness, fns func(live client.Client) interceptor.Funcs) {
	h.NewClient = func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, o)
		if err != nil {
			return nil, err
		}
		live, err := client.New(cfg, client.Options{Scheme: o.Scheme, Mapper: o.Mapper})
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(c, fns(live)), nil
	}
}
