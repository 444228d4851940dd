package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// AdmissionDir is where the admission policies users apply live, relative to the repository root.
var AdmissionDir = filepath.Join("config", "admission")

var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// AdmissionObjects reads the policies and bindings config/admission/kustomization.yaml lists, as
// written there (config/default adds a namePrefix, which changes no behaviour).
func AdmissionObjects() ([]*unstructured.Unstructured, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, AdmissionDir)
	var k struct {
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", AdmissionDir, err)
	}
	var out []*unstructured.Unstructured
	for _, file := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		for _, doc := range documentSeparator.Split(string(data), -1) {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				return nil, fmt.Errorf("%s/%s: %w", AdmissionDir, file, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			out = append(out, obj)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s/kustomization.yaml lists no policies", AdmissionDir)
	}
	return out, nil
}

// probeUser is the identity InstallAdmission acts as to see that the authorization policy is in force:
// it may create ToolCalls but call no tool.
const probeUser = "toolgate:testenv:admission-probe"

// InstallAdmission creates the admission policies of config/admission and waits until the apiserver
// enforces them: a dry-run ToolCall created by the admin gets its requester recorded, one created by a
// user who may create ToolCalls but call no tool is refused, a dry-run update that replaces a key of a
// ToolCall's spec.arguments by another is refused as a change of spec, and a dry-run Tool not named
// after its toolName draws the naming convention's warning. The ToolCall that last check updates is
// created in namespace default and deleted before InstallAdmission returns.
func InstallAdmission(cfg *rest.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NoWarnings{}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	objs, err := AdmissionObjects()
	if err != nil {
		return err
	}
	version, err := mutatingAdmissionPolicyVersion(c)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if strings.HasPrefix(obj.GetKind(), "MutatingAdmissionPolicy") {
			obj.SetAPIVersion("admissionregistration.k8s.io/" + version) // as the chart chooses
		}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("installing %s %s from %s: %w", obj.GetKind(), obj.GetName(), AdmissionDir, err)
		}
	}

	// The probe: allowed to create ToolCalls by RBAC, allowed to call nothing.
	probeRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "toolgate-testenv-admission-probe"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolcalls"}, Verbs: []string{"create"}}}}
	probeBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: probeRole.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: probeRole.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: probeUser}}}
	for _, obj := range []client.Object{probeRole, probeBinding} {
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
		defer func() { _ = c.Delete(context.Background(), obj) }()
	}
	probeCfg := rest.CopyConfig(cfg)
	probeCfg.Impersonate = rest.ImpersonationConfig{UserName: probeUser, Groups: []string{"system:authenticated"}}
	probe, err := client.New(probeCfg, client.Options{})
	if err != nil {
		return err
	}
	warnings := &lastWarning{}
	warnCfg := rest.CopyConfig(cfg)
	warnCfg.WarningHandler = warnings
	warned, err := client.New(warnCfg, client.Options{})
	if err != nil {
		return err
	}

	var last error
	var stored *unstructured.Unstructured // the ToolCall the immutability check updates (dry run)
	defer func() {
		if stored != nil {
			_ = c.Delete(context.Background(), stored)
		}
	}()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		tc := probeToolCall()
		if err := c.Create(ctx, tc, client.DryRunAll); err != nil {
			last = fmt.Errorf("dry-run ToolCall as the admin: %w", err)
			return false, nil
		}
		if user, _, _ := unstructured.NestedString(tc.Object, "spec", "requester", "username"); user == "" {
			last = fmt.Errorf("the requester policy has not recorded the admin as the requester yet")
			return false, nil
		}
		err := probe.Create(ctx, probeToolCall(), client.DryRunAll)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not call tool") {
			last = fmt.Errorf("the authorization policy has not refused a caller without the call verb yet: %v", err)
			return false, nil
		}
		if stored == nil {
			tc := probeToolCall()
			if err := unstructured.SetNestedField(tc.Object, map[string]any{"probe": int64(1)}, "spec", "arguments"); err != nil {
				return false, err
			}
			if err := c.Create(ctx, tc); err != nil {
				last = fmt.Errorf("ToolCall for the immutability check: %w", err)
				return false, nil
			}
			stored = tc
		}
		renamed := stored.DeepCopy()
		if err := unstructured.SetNestedField(renamed.Object, map[string]any{"renamed": int64(1)}, "spec", "arguments"); err != nil {
			return false, err
		}
		err = c.Update(ctx, renamed, client.DryRunAll)
		if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") || !strings.Contains(err.Error(), "spec.arguments") {
			last = fmt.Errorf("the spec immutability policy has not refused a renamed key of spec.arguments yet: %v", err)
			return false, nil
		}
		warnings.set("")
		if err := warned.Create(ctx, probeTool(), client.DryRunAll); err != nil {
			last = fmt.Errorf("dry-run Tool as the admin: %w", err)
			return false, nil
		}
		if !strings.Contains(warnings.get(), "RBAC grants to call it name the toolName") {
			last = fmt.Errorf("the naming convention has not warned about a Tool named otherwise yet")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the admission policies of %s are not in force: %w (last: %v)", AdmissionDir, err, last)
	}
	return nil
}

// lastWarning keeps the last warning the apiserver sent.
type lastWarning struct {
	mu   sync.Mutex
	text string
}

func (w *lastWarning) HandleWarningHeader(_ int, _ string, text string) { w.set(text) }

func (w *lastWarning) set(text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = text
}

func (w *lastWarning) get() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text
}

// probeTool is a Tool whose name does not follow its toolName.
func probeTool() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toolgate.dev/v1alpha1",
		"kind":       "Tool",
		"metadata":   map[string]any{"namespace": metav1.NamespaceDefault, "name": "admission-probe"},
		"spec": map[string]any{
			"toolName": "admission_probe_tool",
			"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never",
				"containers":    []any{map[string]any{"name": "probe", "image": "busybox:1.36"}},
			}}}},
		},
	}}
}

func probeToolCall() *unstructured.Unstructured {
	tc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toolgate.dev/v1alpha1",
		"kind":       "ToolCall",
		"metadata":   map[string]any{"namespace": metav1.NamespaceDefault, "generateName": "admission-probe-"},
		"spec": map[string]any{
			"tool":         "admission_probe",
			"arguments":    map[string]any{},
			"waitingLimit": "1m",
		},
	}}
	return tc
}

// mutatingAdmissionPolicyVersion is the newest version of admissionregistration.k8s.io that serves
// MutatingAdmissionPolicy: v1 from Kubernetes 1.36, v1beta1 on 1.35 where it is turned on.
func mutatingAdmissionPolicyVersion(c client.Client) (string, error) {
	gk := schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}
	for _, v := range []string{"v1", "v1beta1"} {
		if _, err := c.RESTMapper().RESTMapping(gk, v); err == nil {
			return v, nil
		}
	}
	return "", fmt.Errorf("the apiserver serves MutatingAdmissionPolicy neither as admissionregistration.k8s.io/v1 (Kubernetes 1.36 and later) nor as v1beta1 (1.35, turned on by --runtime-config and --feature-gates)")
}
