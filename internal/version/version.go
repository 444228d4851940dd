// Package version says which build of Toolgate is running.
package version

import (
	"runtime/debug"
	"sync"
)

// Version is set at link time (-ldflags "-X toolgate.dev/toolgate/internal/version.Version=0.1.0") by
// release builds; without it, Get reports the source revision the binary was built from.
var Version = ""

// Get is the version of this build: the one set at link time, else the VCS revision Go recorded
// (with "+dirty" for a modified tree), else "devel". It is read once.
var Get = sync.OnceValue(get)

func get() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		return "devel"
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}
