package controllers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

func executionTimeout(tool *tg.Tool) time.Duration {
	if tool.Spec.ExecutionTimeout != nil && tool.Spec.ExecutionTimeout.Duration > 0 {
		return tool.Spec.ExecutionTimeout.Duration
	}
	d, _ := time.ParseDuration(tg.DefaultExecutionTimeout)
	return d
}

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
