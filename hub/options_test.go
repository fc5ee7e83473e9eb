package hub

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestOptionsFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Options
	}{
		{name: "nothing set", env: nil, want: Options{}},
		{name: "all set", env: map[string]string{
			"HF_ENDPOINT": "https://mirror.example/", "HF_TOKEN": " hf_abc\n", "HF_HUB_OFFLINE": "1",
			"HF_HUB_CACHE": "/c/hub", "HF_HOME": "/h", "XDG_CACHE_HOME": "/x",
		}, want: Options{Endpoint: "https://mirror.example", Token: "hf_abc", Offline: true, CacheDir: "/c/hub"}},
		{name: "HF_HOME", env: map[string]string{"HF_HOME": "/h", "XDG_CACHE_HOME": "/x", "HF_HUB_OFFLINE": "TRUE"},
			want: Options{CacheDir: filepath.Join("/h", "hub"), Offline: true}},
		{name: "XDG", env: map[string]string{"XDG_CACHE_HOME": "/x", "HF_HUB_OFFLINE": "0"},
			want: Options{CacheDir: filepath.Join("/x", "huggingface", "hub")}},
		{name: "legacy names", env: map[string]string{"HUGGINGFACE_HUB_CACHE": "/old", "HUGGING_FACE_HUB_TOKEN": "hf_old", "HF_HUB_OFFLINE": "yes"},
			want: Options{CacheDir: "/old", Token: "hf_old", Offline: true}},
		{name: "new token wins", env: map[string]string{"HF_TOKEN": "hf_new", "HUGGING_FACE_HUB_TOKEN": "hf_old"},
			want: Options{Token: "hf_new"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := optionsFromEnv(func(k string) string { return tt.env[k] })
			if got != tt.want {
				t.Fatalf("optionsFromEnv = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRepoInfoDecodesHubAnswer decodes an answer shaped like the Hub's model API
// (extra fields included) with the same struct the client uses.
func TestRepoInfoDecodesHubAnswer(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "api-model-revision.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info repoInfo
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if info.SHA != "4f3bd1d2e2d8a7c0b9e61f5a3c2d1e0f9a8b7c6d" || !commitRE.MatchString(info.SHA) {
		t.Fatalf("sha = %q", info.SHA)
	}
	got := ggufFiles(info.files())
	want := []string{"Qwen3-Embedding-0.6B-Q8_0.gguf", "Qwen3-Embedding-0.6B-f16.gguf"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("gguf files %q, want %q", got, want)
	}
	if f, err := selectFile(repoRef{Owner: "Qwen", Name: "Qwen3-Embedding-0.6B-GGUF"}, got); err != nil || f != want[1] {
		t.Fatalf("default choice %q, %v; want %q", f, err, want[1])
	}
}
