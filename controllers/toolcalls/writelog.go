package toolcalls

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// writeLog remembers, per ToolCall, the resourceVersion the apiserver returned for the controller's
// own last write to it. A reconcile that reads an older resourceVersion from the cache is reading the
// ToolCall from before that write: it waits for the watch to deliver the write instead of repeating
// the step (a replayed submission, a duplicate status write and Event, a finalizer patch that
// conflicts). Any write moves the resourceVersion forward, so no step or phase needs naming here.
type writeLog struct {
	mu       sync.Mutex
	versions map[types.UID]string
}

// staleRequeue is the backstop requeue of a reconcile that found the cache behind: the watch event
// of the write reconciles again before it.
const staleRequeue = 2 * time.Second

// wrote records tc's resourceVersion as the apiserver returned it for a write of the controller's.
func (l *writeLog) wrote(tc *tg.ToolCall) {
	if tc.ResourceVersion == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.versions == nil {
		l.versions = map[types.UID]string{}
	}
	l.versions[tc.UID] = tc.ResourceVersion
}

// behind reports whether the cached tc is older than the controller's last write to it. Once the
// cache has caught up, the entry is dropped. A resourceVersion that cannot be compared (not one the
// apiserver issued) is never taken as behind: the reconcile goes on with what it read.
func (l *writeLog) behind(tc *tg.ToolCall) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	want, ok := l.versions[tc.UID]
	if !ok {
		return false
	}
	if c, err := resourceversion.CompareResourceVersion(tc.ResourceVersion, want); err == nil && c < 0 {
		return true
	}
	delete(l.versions, tc.UID)
	return false
}

func (l *writeLog) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.versions, uid)
}
