package providers

import (
	"errors"
	"fmt"
)

// unusable is why a provider object cannot serve, as an error that carries its reason: the reason its
// Ready condition takes (empty where the one asking is a call, for which the object is missing or not
// Ready yet) and a message that names what to fix. Every step of the provider side returns it as an
// error; the step that writes a condition reads the reason back with UnusableOf.
type Unusable struct {
	Reason  string
	Message string
}

func (u *Unusable) Error() string { return u.Message }

// Unusablef is an unusable with the given reason and message.
func Unusablef(reason, format string, args ...any) error {
	return &Unusable{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// UnusableOf returns the unusable err is, or wraps; ok is false for any other error (an apiserver
// read that failed, say), which is retried rather than reported.
func UnusableOf(err error) (u *Unusable, ok bool) {
	ok = errors.As(err, &u)
	return u, ok
}
