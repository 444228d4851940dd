package toolcall

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// watch follows the ToolCall from tc (already read, already passed to progress) until it is terminal.
// client-go's RetryWatcher keeps a watch open from the last resourceVersion seen (bookmarks included)
// and reopens it whenever it closes or fails. The ToolCall is read again only when the apiserver no
// longer has that resourceVersion ("too old"); a new RetryWatcher then starts from the fresh object.
func (c *Client) watch(ctx context.Context, tc *tg.ToolCall, progress func(*tg.ToolCall)) (*Result, error) {
	last := tc
	for !last.Status.Phase.IsTerminal() {
		err := c.follow(ctx, &last, progress)
		if errors.Is(err, errTooOld) {
			var fresh *tg.ToolCall
			if fresh, err = c.refresh(ctx, last); err == nil {
				c.observe(&last, fresh, progress)
			}
		}
		if err != nil {
			return resultOf(last), err
		}
	}
	return outcome(last)
}

// errTooOld ends a follow whose resourceVersion the apiserver no longer has.
var errTooOld = errors.New("resourceVersion too old")

// follow reads one RetryWatcher, from last's resourceVersion, until the ToolCall is terminal (nil),
// gone, ctx ends, or the watch cannot go on: errTooOld, or an error that reopening it will not cure.
func (c *Client) follow(ctx context.Context, last **tg.ToolCall, progress func(*tg.ToolCall)) error {
	name := (*last).Name
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The RetryWatcher reopens a watch on any error; an error no reopening cures stops it here, and
	// is kept for the reason.
	var mu sync.Mutex
	var stopped error
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		w, err := c.c.Watch(ctx, &tg.ToolCallList{}, &client.ListOptions{
			Namespace:     c.namespace,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", name),
			Raw:           &opts,
		})
		if err != nil && (tooOld(err) || fatal(err)) {
			mu.Lock()
			stopped = err
			mu.Unlock()
			cancel()
		}
		return w, err
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, (*last).ResourceVersion, lw)
	if err != nil {
		return fmt.Errorf("toolcall: watching ToolCall %s/%s: %w", c.namespace, name, err)
	}
	defer func() {
		rw.Stop()
		<-rw.Done()
	}()
	for !(*last).Status.Phase.IsTerminal() {
		ev, ok := <-rw.ResultChan()
		if !ok {
			mu.Lock()
			err := stopped
			mu.Unlock()
			return c.ended(ctx, *last, err)
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			tc, ok := ev.Object.(*tg.ToolCall)
			if !ok {
				continue
			}
			if tc.UID != (*last).UID {
				return c.deleted(*last)
			}
			c.observe(last, tc, progress)
		case watch.Deleted:
			if tc, ok := ev.Object.(*tg.ToolCall); ok && tc.UID == (*last).UID {
				*last = tc
			}
			return c.deleted(*last)
		case watch.Error:
			// The RetryWatcher passes on only what it does not retry: a resourceVersion too old, a
			// refused watch, or an event it cannot follow.
			return c.ended(ctx, *last, apierrors.FromObject(ev.Object))
		}
	}
	return nil
}

// ended says why a follow stopped: the resourceVersion is too old, err, or ctx ended.
func (c *Client) ended(ctx context.Context, last *tg.ToolCall, err error) error {
	switch {
	case tooOld(err):
		return errTooOld
	case err == nil && ctx.Err() != nil:
		return c.stopped(last, ctx.Err())
	case err == nil:
		err = errors.New("the watch ended")
	}
	return fmt.Errorf("toolcall: watching ToolCall %s/%s: %w", c.namespace, last.Name, err)
}

// observe records a newer state of the ToolCall and reports it.
func (c *Client) observe(last **tg.ToolCall, tc *tg.ToolCall, progress func(*tg.ToolCall)) {
	changed := tc.ResourceVersion != (*last).ResourceVersion
	*last = tc
	if changed && progress != nil {
		progress(tc.DeepCopy())
	}
}

// refresh reads the ToolCall again after its resourceVersion became too old to watch from.
func (c *Client) refresh(ctx context.Context, last *tg.ToolCall) (*tg.ToolCall, error) {
	tc, err := c.get(ctx, last.Name)
	switch {
	case err == nil && tc.UID == last.UID:
		return tc, nil
	case err == nil || apierrors.IsNotFound(err):
		return nil, c.deleted(last)
	case ctx.Err() != nil:
		return nil, c.stopped(last, ctx.Err())
	default:
		return nil, err
	}
}

func (c *Client) deleted(last *tg.ToolCall) error {
	return fmt.Errorf("toolcall: ToolCall %s/%s was deleted by someone else before it reached a terminal phase (last phase %s); create a new ToolCall to try again: %w",
		c.namespace, last.Name, last.Status.Phase.OrPending(), ErrDeleted)
}

func (c *Client) stopped(last *tg.ToolCall, err error) error {
	return fmt.Errorf("toolcall: stopped waiting for ToolCall %s/%s in phase %s: %w", c.namespace, last.Name, last.Status.Phase.OrPending(), err)
}

func outcome(tc *tg.ToolCall) (*Result, error) {
	if tc.Status.Phase == tg.PhaseSucceeded {
		return resultOf(tc), nil
	}
	return resultOf(tc), errorOf(tc)
}

// tooOld reports the apiserver's answer for a resourceVersion it no longer has.
func tooOld(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// fatal reports errors that reopening the watch will not cure.
func fatal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err)
}
