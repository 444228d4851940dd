package toolcalls

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func durationPtr(d *metav1.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	return &d.Duration
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(*t)
	return &mt
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}
