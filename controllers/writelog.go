package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// stage orders what the controller has written to a ToolCall: each write moves it forward.
func stage(tc *tg.ToolCall) int {
	fin := controllerutil.ContainsFinalizer(tc, tg.Finalizer)
	switch {
	case tc.Status.Phase.OrPending() == tg.PhasePending:
		if fin {
			return 1 // accepted
		}
		return 0
	case tc.Status.Phase == tg.PhaseAwaitingApproval:
		return 2
	case tc.Status.Phase == tg.PhaseRunning:
		if fin {
			return 3
		}
		return 4
	case fin: // terminal
		return 5
	default:
		return 6
	}
}

// writeLog remembers, per ToolCall, the stage of the controller's own last write. A reconcile that
// reads an older stage from the cache is reading from before that write: it waits for the watch to
// deliver the write instead of repeating the step (a replayed submission, a duplicate status write
// and event, a finalizer patch that conflicts).
type writeLog struct {
	mu     sync.Mutex
	stages map[types.UID]written
}

type written struct {
	stage int
	at    time.Time
}

// staleRequeue is the backstop requeue of a reconcile that found the cache behind.
const staleRequeue = 2 * time.Second

// staleLimit bounds how long the cache is assumed to be catching up: after it, whatever the cache
// shows is taken as it is (someone else may have changed the object since).
const staleLimit = 10 * time.Second

func (l *writeLog) wrote(tc *tg.ToolCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stages == nil {
		l.stages = map[types.UID]written{}
	}
	if s := stage(tc); s >= l.stages[tc.UID].stage {
		l.stages[tc.UID] = written{stage: s, at: time.Now()}
	}
}

// behind reports whether the cached tc is older than the controller's last write to it. Once the
// cache has caught up with the final stage, the entry is dropped.
func (l *writeLog) behind(tc *tg.ToolCall) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	want, ok := l.stages[tc.UID]
	if !ok {
		return false
	}
	have := stage(tc)
	if have >= want.stage || time.Since(want.at) > staleLimit {
		delete(l.stages, tc.UID)
		return false
	}
	return true
}

func (l *writeLog) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.stages, uid)
}
