package toolcall

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Backoff between attempts to reopen a watch that failed or closed without delivering anything.
const (
	rewatchBackoffBase = 100 * time.Millisecond
	rewatchBackoffCap  = 5 * time.Second
)

// watch follows the ToolCall from tc (already read, already passed to progress) until it is terminal.
// It reads the object again only when the apiserver no longer has tc's resourceVersion ("too old"):
// a watch that merely closes is reopened from the last resourceVersion seen.
func (c *Client) watch(ctx context.Context, tc *tg.ToolCall, progress func(*tg.ToolCall)) (*Result, error) {
	last := tc
	// rv is where the next watch starts: the last object's, or a newer bookmark's.
	rv := tc.ResourceVersion
	backoff := time.Duration(0)
	// resync reads the ToolCall again when its resourceVersion is too old to watch from, and has the
	// next watch start at once from the fresh object.
	resync := func() error {
		fresh, err := c.refresh(ctx, last)
		if err != nil {
			return err
		}
		c.observe(&last, fresh, progress)
		rv = last.ResourceVersion
		backoff = 0
		return nil
	}
	for {
		if last.Status.Phase.IsTerminal() {
			return outcome(last)
		}
		if err := ctx.Err(); err != nil {
			return resultOf(last), c.stopped(last, err)
		}
		if backoff > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return resultOf(last), c.stopped(last, ctx.Err())
			case <-t.C:
			}
		}

		w, err := c.c.Watch(ctx, &tg.ToolCallList{}, &client.ListOptions{
			Namespace:     c.namespace,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", last.Name),
			Raw:           &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
		})
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return resultOf(last), c.stopped(last, ctx.Err())
		case tooOld(err):
			if rerr := resync(); rerr != nil {
				return resultOf(last), rerr
			}
			continue
		case fatal(err):
			return resultOf(last), fmt.Errorf("toolcall: watching ToolCall %s/%s: %w", c.namespace, last.Name, err)
		default:
			backoff = nextBackoff(backoff)
			continue
		}

		next, delivered, err := c.follow(ctx, w, &last, &rv, progress)
		w.Stop()
		switch {
		case err != nil:
			return resultOf(last), err
		case next == followTooOld:
			if rerr := resync(); rerr != nil {
				return resultOf(last), rerr
			}
		case delivered:
			backoff = 0
		default:
			backoff = nextBackoff(backoff)
		}
	}
}

type followEnd int

const (
	followClosed followEnd = iota // reopen from the last resourceVersion
	followTooOld                  // read the object again, then reopen
)

// follow reads one watch until it closes, the ToolCall is terminal or gone, or ctx ends. delivered
// reports whether the watch carried anything (an event or a bookmark).
func (c *Client) follow(ctx context.Context, w watch.Interface, last **tg.ToolCall, rv *string, progress func(*tg.ToolCall)) (end followEnd, delivered bool, err error) {
	for {
		if (*last).Status.Phase.IsTerminal() {
			return followClosed, delivered, nil
		}
		select {
		case <-ctx.Done():
			return followClosed, delivered, c.stopped(*last, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return followClosed, delivered, nil
			}
			delivered = true
			switch ev.Type {
			case watch.Added, watch.Modified:
				tc, ok := ev.Object.(*tg.ToolCall)
				if !ok {
					continue
				}
				if tc.UID != (*last).UID {
					return followClosed, delivered, c.deleted(*last)
				}
				c.observe(last, tc, progress)
				*rv = tc.ResourceVersion
			case watch.Deleted:
				if tc, ok := ev.Object.(*tg.ToolCall); ok && tc.UID == (*last).UID {
					*last = tc
				}
				return followClosed, delivered, c.deleted(*last)
			case watch.Bookmark:
				if obj, ok := ev.Object.(client.Object); ok && obj.GetResourceVersion() != "" {
					*rv = obj.GetResourceVersion()
				}
			case watch.Error:
				if tooOld(apierrors.FromObject(ev.Object)) {
					return followTooOld, delivered, nil
				}
				// Any other error ends this watch; it is reopened from the last resourceVersion.
				return followClosed, false, nil
			}
		}
	}
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
		c.namespace, last.Name, phaseName(last.Status.Phase), ErrDeleted)
}

func (c *Client) stopped(last *tg.ToolCall, err error) error {
	return fmt.Errorf("toolcall: stopped waiting for ToolCall %s/%s in phase %s: %w", c.namespace, last.Name, phaseName(last.Status.Phase), err)
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

func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return rewatchBackoffBase
	}
	return min(2*d, rewatchBackoffCap)
}

// phaseName shows a ToolCall the controller has not seen yet as Pending.
func phaseName(p tg.ToolCallPhase) tg.ToolCallPhase {
	if p == "" {
		return tg.PhasePending
	}
	return p
}
