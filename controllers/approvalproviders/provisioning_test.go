package approvalproviders

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
)

func TestRenewAt(t *testing.T) {
	issued := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: issued.Add(d)} }
	never := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		inst tg.ProviderInstance
		want time.Time
	}{
		{"no expiry", tg.ProviderInstance{CredentialIssuedAt: at(0)}, never},
		{"two thirds of 30 days", tg.ProviderInstance{CredentialIssuedAt: at(0), CredentialExpiresAt: at(30 * 24 * time.Hour)}, issued.Add(20 * 24 * time.Hour)},
		{"two thirds of 30 s", tg.ProviderInstance{CredentialIssuedAt: at(0), CredentialExpiresAt: at(30 * time.Second)}, issued.Add(20 * time.Second)},
		{"issue time unknown: at expiry", tg.ProviderInstance{CredentialExpiresAt: at(time.Hour)}, issued.Add(time.Hour)},
		{"expired when issued: at once", tg.ProviderInstance{CredentialIssuedAt: at(time.Hour), CredentialExpiresAt: at(0)}, issued.Add(time.Hour / 3)},
	} {
		if got := renewAt(&tc.inst); !got.Equal(tc.want) {
			t.Errorf("%s: renewAt = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestProviderRequeue(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now)}
	expiring := func(renewIn time.Duration) *tg.ApprovalProvider {
		return &tg.ApprovalProvider{
			Spec: tg.ApprovalProviderSpec{Provisioning: &tg.Provisioning{}},
			Status: tg.ApprovalProviderStatus{Instance: &tg.ProviderInstance{
				CredentialIssuedAt:  &metav1.Time{Time: now.Add(renewIn - 2*time.Hour)},
				CredentialExpiresAt: &metav1.Time{Time: now.Add(renewIn + time.Hour)},
			}},
		}
	}
	for _, tc := range []struct {
		name     string
		obj      tg.GenericProvider
		progress readiness.Progress
		renewal  string
		retire   time.Duration
		want     time.Duration
	}{
		{"ready", &tg.ApprovalProvider{}, readiness.Usable, "", 0, reprobeReady},
		{"not ready", &tg.ApprovalProvider{}, readiness.Retrying, "", 0, reprobeNotReady},
		{"ready, replacement failed", expiring(-time.Minute), readiness.Usable, "could not be replaced", 0, reprobeNotReady},
		{"ready, replacement due in a minute", expiring(time.Minute), readiness.Usable, "", 0, time.Minute},
		{"ready, replacement due in a day", expiring(24 * time.Hour), readiness.Usable, "", 0, reprobeReady},
		{"ready, a replaced instance to look at again", &tg.ApprovalProvider{}, readiness.Usable, "", 3 * time.Second, 3 * time.Second},
		{"issued credential: no replacement", &tg.ApprovalProvider{Status: expiring(time.Minute).Status}, readiness.Usable, "", 0, reprobeReady},
	} {
		if got := r.requeue(tc.obj, tc.progress, tc.renewal, tc.retire); got != tc.want {
			t.Errorf("%s: requeue = %s, want %s", tc.name, got, tc.want)
		}
	}
}
