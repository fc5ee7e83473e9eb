package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// TestEmbedJob checks the Indexed Job of embed-job.yaml: the fields a sharded,
// resumable run depends on, and that the binary runs the pod's command line (its
// args and env, paths moved to a temporary directory, the test model) as the last
// index, writing that index's part.
func TestEmbedJob(t *testing.T) {
	m := load(t)
	j := m.job
	s := j.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode %v, want Indexed (each pod gets JOB_COMPLETION_INDEX)", s.CompletionMode)
	}
	if s.Completions == nil || s.Parallelism == nil || *s.Parallelism < 1 || *s.Parallelism > *s.Completions {
		t.Fatalf("completions %v parallelism %v: want 1 ≤ parallelism ≤ completions", s.Completions, s.Parallelism)
	}
	if s.BackoffLimitPerIndex == nil || *s.BackoffLimitPerIndex < 1 {
		t.Errorf("backoffLimitPerIndex %v, want ≥ 1: a killed shard is retried and resumes", s.BackoffLimitPerIndex)
	}
	pod := s.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never (required by backoffLimitPerIndex)", pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if envOf(c, "EMBED_STACK_SHARDS") != fmt.Sprint(*s.Completions) {
		t.Errorf("EMBED_STACK_SHARDS %q, want completions (%d)", envOf(c, "EMBED_STACK_SHARDS"), *s.Completions)
	}
	var claim string
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claim != m.pvc.Name || len(m.pvc.Spec.AccessModes) != 1 || m.pvc.Spec.AccessModes[0] != corev1.ReadWriteMany {
		t.Errorf("the pods mount claim %q; the manifest's PVC is %q with %v, want it ReadWriteMany", claim, m.pvc.Name, m.pvc.Spec.AccessModes)
	}
	var dataMount string
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.PersistentVolumeClaim != nil {
				dataMount = vm.MountPath
			}
		}
	}
	if len(c.Args) != 3 || c.Args[0] != "embed" {
		t.Fatalf("args %v, want embed --input=… --output=…", c.Args)
	}
	for _, a := range c.Args[1:] {
		flag, path, _ := strings.Cut(a, "=")
		if (flag != "--input" && flag != "--output") || dataMount == "" || !strings.HasPrefix(path, dataMount+"/") {
			t.Errorf("%s: want --input and --output on the shared volume (mounted at %q)", a, dataMount)
		}
	}

	t.Run("the binary runs the last index", func(t *testing.T) {
		bin, model := e2e.Paths(t)
		dir := t.TempDir()
		var in strings.Builder
		for i := range 40 {
			fmt.Fprintf(&in, `{"id":%d,"text":"line %d"}`+"\n", i, i)
		}
		os.WriteFile(filepath.Join(dir, "input.jsonl"), []byte(in.String()), 0o644)
		args := []string{}
		for _, a := range c.Args {
			args = append(args, strings.ReplaceAll(a, dataMount+"/", dir+"/"))
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "JOB_COMPLETION_INDEX="+fmt.Sprint(*s.Completions-1))
		for _, e := range c.Env {
			switch e.Name {
			case "EMBED_STACK_MODEL":
				e.Value = model
			case "HF_HOME", "EMBED_STACK_THREADS":
				continue
			}
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		cmd.Env = append(cmd.Env, "EMBED_STACK_THREADS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		part := filepath.Join(dir, fmt.Sprintf("vectors-%05d-of-%05d.npy", *s.Completions-1, *s.Completions))
		if _, err := os.Stat(part); err != nil {
			t.Fatalf("no part %s after the run: %v\n%s", filepath.Base(part), err, out)
		}
	})
}
