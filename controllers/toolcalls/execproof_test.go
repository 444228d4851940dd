package toolcalls

import (
	"bytes"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestProofBindsNamespaceJobCallAndDecision(t *testing.T) {
	key := bytes.Repeat([]byte{7}, executionKeyBytes)
	const approved = `{"status":"approved","source":"Policy","rule":"lookups"}`
	base := proof(key, "payments", "refund-0a1b2c3d4e", "uid-1", approved)
	if base != proof(key, "payments", "refund-0a1b2c3d4e", "uid-1", approved) {
		t.Fatal("the proof of one Job differs from itself")
	}
	for name, other := range map[string]string{
		"another namespace":          proof(key, "billing", "refund-0a1b2c3d4e", "uid-1", approved),
		"another Job name":           proof(key, "payments", "refund-0a1b2c3d4f", "uid-1", approved),
		"another call":               proof(key, "payments", "refund-0a1b2c3d4e", "uid-2", approved),
		"another decision":           proof(key, "payments", "refund-0a1b2c3d4e", "uid-1", `{"status":"approved","source":"Policy","rule":"everything"}`),
		"no decision":                proof(key, "payments", "refund-0a1b2c3d4e", "uid-1", ""),
		"fields run into each other": proof(key, "payments\x00refund-0a1b2c3d4e", "", "uid-1", approved),
		"another key":                proof(bytes.Repeat([]byte{8}, executionKeyBytes), "payments", "refund-0a1b2c3d4e", "uid-1", approved),
	} {
		if other == base {
			t.Errorf("%s: same proof %q", name, base)
		}
	}
}

func TestMadeFromTemplate(t *testing.T) {
	tool := corev1.Container{Name: "tool", Image: "example.com/issue-refund:1", Command: []string{"/refund"}, Args: []string{"--live"},
		Env:          []corev1.EnvVar{{Name: "TOOL_ARGUMENTS", Value: `{"amount":5}`}},
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/refund"}}}
	volume := corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "refund"}}}}
	job := &batchv1.Job{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ServiceAccountName: "refunder", Containers: []corev1.Container{tool}, Volumes: []corev1.Volume{volume}}}}}
	for _, c := range []struct {
		name   string
		change func(*corev1.PodSpec)
		want   bool
	}{
		{"as the Job controller makes it", func(*corev1.PodSpec) {}, true},
		{"with what admission adds", func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
			p.Containers[0].VolumeMounts = append(p.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
			p.Containers[0].Env = append(p.Containers[0].Env, corev1.EnvVar{Name: "INJECTED", Value: "1"})
			p.Containers = append(p.Containers, corev1.Container{Name: "proxy", Image: "example.com/proxy:1"})
		}, true},
		{"another image", func(p *corev1.PodSpec) { p.Containers[0].Image = "example.com/forged:1" }, false},
		{"another command", func(p *corev1.PodSpec) { p.Containers[0].Command = []string{"/forged"} }, false},
		{"other arguments", func(p *corev1.PodSpec) { p.Containers[0].Args = nil }, false},
		{"another working directory", func(p *corev1.PodSpec) { p.Containers[0].WorkingDir = "/tmp" }, false},
		{"other tool arguments", func(p *corev1.PodSpec) { p.Containers[0].Env[0].Value = `{"amount":500}` }, false},
		{"env from elsewhere", func(p *corev1.PodSpec) {
			p.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}}
		}, false},
		{"the mount elsewhere", func(p *corev1.PodSpec) { p.Containers[0].VolumeMounts[0].Name = "other" }, false},
		{"the volume from another source", func(p *corev1.PodSpec) { p.Volumes[0].ConfigMap.Name = "forged" }, false},
		{"the tool's container missing", func(p *corev1.PodSpec) { p.Containers[0].Name = "renamed" }, false},
		{"another ServiceAccount", func(p *corev1.PodSpec) { p.ServiceAccountName = "default" }, false},
		{"an init container the template lacks runs first", func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "setup", Image: "example.com/forged:1"}}
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: *job.Spec.Template.Spec.DeepCopy()}
			c.change(&pod.Spec)
			if got := madeFromTemplate(job, pod); got != c.want {
				t.Errorf("madeFromTemplate = %v, want %v", got, c.want)
			}
		})
	}
	withInit := job.DeepCopy()
	withInit.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "example.com/setup:1"}}
	if madeFromTemplate(withInit, &corev1.Pod{Spec: job.Spec.Template.Spec}) {
		t.Error("a Pod without the template's init container passed")
	}
}

// What the cache keeps of a Pod (SlimPod) is enough to tell a Pod that runs the template's images from
// one that does not.
func TestRunsTemplateImagesOnACachedPod(t *testing.T) {
	job := &batchv1.Job{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "setup", Image: "example.com/setup:1"}},
		Containers:     []corev1.Container{{Name: "tool", Image: "example.com/issue-refund:1", Command: []string{"/refund"}}}}}}}
	slim := func(spec corev1.PodSpec) *corev1.Pod {
		obj, err := SlimPod(&corev1.Pod{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*corev1.Pod)
	}
	if !runsTemplateImages(job, slim(job.Spec.Template.Spec)) {
		t.Error("the Job's own Pod, as cached, did not pass")
	}
	forged := job.Spec.Template.Spec.DeepCopy()
	forged.Containers[0].Image = "example.com/forged:1"
	if runsTemplateImages(job, slim(*forged)) {
		t.Error("a Pod running another image passed")
	}
	noInit := job.Spec.Template.Spec.DeepCopy()
	noInit.InitContainers = nil
	if runsTemplateImages(job, slim(*noInit)) {
		t.Error("a Pod without the template's init container passed")
	}
}
