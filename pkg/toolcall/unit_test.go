package toolcall_test

import (
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
)

func TestArguments(t *testing.T) {
	type refund struct {
		PaymentID string `json:"payment_id"`
		Amount    int    `json:"amount"`
	}
	cases := []struct {
		name    string
		args    any
		want    string // JSON, when accepted
		wantErr string // substring, when refused
	}{
		{"raw message as is", json.RawMessage(` {"b":1, "a":2} `), `{"b":1, "a":2}`, ""},
		{"bytes as is", []byte(`{"a":[1,2]}`), `{"a":[1,2]}`, ""},
		{"map", map[string]any{"amount": 4900}, `{"amount":4900}`, ""},
		{"struct", refund{"p1", 5}, `{"payment_id":"p1","amount":5}`, ""},
		{"empty object", map[string]any{}, `{}`, ""},
		{"nil", nil, "", "arguments are missing"},
		{"nil map", map[string]any(nil), "", "arguments must be a JSON object, got null"},
		{"array", []int{1}, "", "arguments must be a JSON object, got an array"},
		{"go string", `{"a":1}`, "", "pass json.RawMessage(s)"},
		{"number", 3, "", "got a number"},
		{"invalid raw", json.RawMessage(`{"a":`), "", "arguments are not valid JSON"},
		{"empty raw", []byte{}, "", "arguments are not valid JSON (empty input)"},
		{"unencodable", map[string]any{"f": func() {}}, "", "arguments cannot be encoded as JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := toolcall.Arguments(c.args)
			if c.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(c.wantErr)))
				g.Expect(err.Error()).To(ContainSubstring("arguments"))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(c.want))
		})
	}
}

func TestGenerateName(t *testing.T) {
	cases := map[string]string{
		"issue_refund":    "issue-refund-",
		"Restart.Service": "restart-service-",
		"__x__":           "x-",
		"":                "toolcall-",
		"日本":              "toolcall-",
		"a23456789012345678901234567890123456789012345": "a234567890123456789012345678901234567890-",
	}
	for tool, want := range cases {
		NewWithT(t).Expect(toolcall.GenerateName(tool)).To(Equal(want), tool)
	}
}

func TestErrorMatchesItsPhaseOnly(t *testing.T) {
	sentinels := map[tg.ToolCallPhase]error{
		tg.PhaseDenied: toolcall.ErrDenied, tg.PhaseExpired: toolcall.ErrExpired,
		tg.PhaseApprovalUnavailable: toolcall.ErrApprovalUnavailable, tg.PhaseCancelled: toolcall.ErrCancelled,
		tg.PhaseRejected: toolcall.ErrRejected, tg.PhaseFailed: toolcall.ErrFailed,
	}
	for phase, want := range sentinels {
		var err error = &toolcall.Error{Phase: phase, Name: "x"}
		for _, other := range sentinels {
			NewWithT(t).Expect(errors.Is(err, other)).To(Equal(other == want), "%s vs %v", phase, other)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	cases := []struct {
		err  toolcall.Error
		want string
	}{
		{toolcall.Error{Name: "r1", Phase: tg.PhaseDenied, Reason: "Denied", Message: "A human denied the request.", Note: "Not a duplicate."},
			`toolcall r1: Denied: A human denied the request. Approver's note: "Not a duplicate."`},
		{toolcall.Error{Name: "r1", Phase: tg.PhaseDenied, Reason: "Denied", Message: "Denied: Not a duplicate.", Note: "Not a duplicate."},
			`toolcall r1: Denied: Denied: Not a duplicate.`},
		{toolcall.Error{Name: "r2", Phase: tg.PhaseFailed, Reason: "JobFailed", Message: "The Job failed.", Note: "approved"},
			`toolcall r2: Failed (JobFailed): The Job failed.`},
		{toolcall.Error{Name: "r3", Phase: tg.PhaseRejected, Reason: "UnknownTool"}, `toolcall r3: Rejected (UnknownTool)`},
	}
	for _, c := range cases {
		NewWithT(t).Expect(c.err.Error()).To(Equal(c.want))
	}
}
