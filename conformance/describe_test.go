package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/embed-stack/embed-stack/internal/buildinfo"
)

// infoResponse is GET /info; decoded strictly, so a new field fails here until it is
// named (and documented in server/openapi.json).
type infoResponse struct {
	Models []struct {
		ID           string   `json:"id"`
		Aliases      []string `json:"aliases"`
		Task         string   `json:"task"`
		Source       string   `json:"source"`
		File         string   `json:"file"`
		SizeBytes    int64    `json:"size_bytes"`
		Quantization string   `json:"quantization"`
		Architecture string   `json:"architecture"`
		SHA256       *string  `json:"sha256"`
		// The weights the workers compute with (issue 23): the file's, or BF16
		// converted at load from it (--weights auto on a CPU with AVX-512 BF16).
		Weights              string `json:"weights"`
		WeightsConvertedFrom string `json:"weights_converted_from"`
		ContextLength        int    `json:"context_length"`
		Tokenizer            string `json:"tokenizer"`
		SpecialTokens        string `json:"special_tokens"`
		Pooling              string `json:"pooling"`
		Prompts              struct {
			Family      string `json:"family"`
			Query       string `json:"query"`
			Document    string `json:"document"`
			Instruction string `json:"instruction"`
		} `json:"prompts"`
		OutputTypes         []string `json:"output_types"`
		Dimensions          int      `json:"dimensions"`
		MinDimensions       int      `json:"min_dimensions"`
		MaxInputs           int      `json:"max_inputs"`
		MaxTotalTokens      int      `json:"max_total_tokens"`
		MaxInputTokens      int      `json:"max_input_tokens"`
		MaxInstructionBytes int      `json:"max_instruction_bytes"`
	} `json:"models"`
	Device string `json:"device"`
	// The build of ggml's CPU kernels the warm worker runs (issue 23): which one
	// depends on the host and on the variant libraries next to the binary.
	CPUVariant string `json:"cpu_variant"`
	Limits     struct {
		MaxBodyBytes          int64   `json:"max_body_bytes"`
		MaxConcurrentRequests int     `json:"max_concurrent_requests"`
		RequestTimeoutSeconds float64 `json:"request_timeout_seconds"`
	} `json:"limits"`
	// TEI's /info keys, for the first embedding model.
	ModelID    string  `json:"model_id"`
	ModelSHA   *string `json:"model_sha"`
	ModelDtype string  `json:"model_dtype"`
	ModelType  struct {
		Embedding struct {
			Pooling string `json:"pooling"`
		} `json:"embedding"`
	} `json:"model_type"`
	MaxConcurrentRequests int     `json:"max_concurrent_requests"`
	MaxInputLength        int     `json:"max_input_length"`
	MaxBatchTokens        int     `json:"max_batch_tokens"`
	MaxBatchRequests      *int    `json:"max_batch_requests"`
	MaxClientBatchSize    int     `json:"max_client_batch_size"`
	AutoTruncate          bool    `json:"auto_truncate"`
	TokenizationWorkers   int     `json:"tokenization_workers"`
	SHA                   *string `json:"sha"`
	DockerLabel           *string `json:"docker_label"`

	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
}

// GET /info describes the served model and the build; the build is the one
// `embed-stack --version` prints and the build_info metric carries.
func TestInfo(t *testing.T) {
	s := truncServer(t)
	r := s.do(t, http.MethodGet, "/info", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /info: %d %s", r.status, truncate(r.body))
	}
	var info infoResponse
	r.decode(t, &info)
	if len(info.Models) != 1 {
		t.Fatalf("models %+v, want one", info.Models)
	}
	m := info.Models[0]
	if m.ID != s.modelID(t) || m.Task != "embedding" || m.Pooling != "last" || m.Dimensions != 64 || m.MinDimensions != 32 ||
		m.MaxInputs != 2048 || m.MaxTotalTokens != 300000 || m.MaxInputTokens != 64 || m.MaxInstructionBytes != 4096 {
		t.Errorf("model %+v: want the tiny model's 64 dimensions and this server's limits (max_input_tokens 64)", m)
	}
	if info.ModelID != m.ID || info.ModelDtype != "float16" || info.ModelType.Embedding.Pooling != "last_token" || info.MaxInputLength != 64 ||
		info.MaxBatchTokens != 300000 || info.MaxClientBatchSize != 2048 || info.AutoTruncate || info.MaxConcurrentRequests != info.Limits.MaxConcurrentRequests {
		t.Errorf("TEI's keys %+v: want the model's id, float16, last_token pooling, its limits", info)
	}
	if info.CPUVariant == "" {
		t.Errorf("cpu_variant is empty: the warm worker is ready, so it names its CPU kernels")
	}
	// What the model is and how its inputs are made (issue 25): Qwen3's context,
	// BPE vocabulary, closing <|endoftext|> and instruction wrapping.
	if m.ContextLength != 32768 || m.Tokenizer != "BPE" || m.SpecialTokens != "<|endoftext|>" || m.Prompts.Family != "qwen3" ||
		m.Prompts.Query != "Instruct: {instruction}\nQuery:" || m.Prompts.Document != "" || m.Prompts.Instruction == "" {
		t.Errorf("model %+v: want context 32768, BPE, <|endoftext|> and the qwen3 prompts", m)
	}
	if strings.Join(m.OutputTypes, ",") != "float,base64,int8,uint8,binary,ubinary" {
		t.Errorf("output_types %v", m.OutputTypes)
	}
	// Where the served bytes came from and what they are (issue 27): --model as
	// given, the file, the weights' type (genmodel writes F16 matrices) and, once
	// hashed in the background, the file's sha256.
	st, err := os.Stat(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	if m.Source != modelPath || m.File != filepath.Base(modelPath) || m.SizeBytes != st.Size() || m.Quantization != "F16" || m.Architecture != "qwen3" {
		t.Errorf("model %+v: want source %s, file %s, %d bytes, F16, qwen3", m, modelPath, filepath.Base(modelPath), st.Size())
	}
	// The F16 file as it is, or converted to BF16 at load where the CPU kernels
	// have AVX-512 BF16 (--weights auto): either way the weights are named.
	if !(m.Weights == "F16" && m.WeightsConvertedFrom == "") && !(m.Weights == "BF16" && m.WeightsConvertedFrom == "F16") {
		t.Errorf("model weights %q converted from %q: want F16 as the file is, or BF16 converted from F16", m.Weights, m.WeightsConvertedFrom)
	}
	data, err := os.ReadFile(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	deadline := time.Now().Add(30 * time.Second)
	for m.SHA256 == nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		var again infoResponse
		s.do(t, http.MethodGet, "/info", nil, nil).decode(t, &again)
		m = again.Models[0]
	}
	if m.SHA256 == nil || *m.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 %v, want %x (within 30 s of start)", m.SHA256, sum)
	}
	// The device is the warm worker's, as /health names it: "cpu", or on a GPU its
	// backend, with the device's index for CUDA ("cuda:0").
	var health struct {
		Device struct {
			GPU     bool   `json:"gpu"`
			Backend string `json:"backend"`
		} `json:"device"`
	}
	// Only the two fields: the rest of /health is TestHealthAndReady's.
	if err := json.Unmarshal(s.do(t, http.MethodGet, "/health", nil, nil).body, &health); err != nil {
		t.Fatalf("/health: %v", err)
	}
	wantDevice := "cpu"
	if health.Device.GPU {
		wantDevice = strings.ToLower(health.Device.Backend)
	}
	if !(info.Device == wantDevice || strings.HasPrefix(info.Device, wantDevice+":")) || info.Limits.MaxBodyBytes != 32<<20 || info.Limits.MaxConcurrentRequests <= 0 || info.Limits.RequestTimeoutSeconds <= 0 {
		t.Errorf("device %q (want %s, as /health says) limits %+v", info.Device, wantDevice, info.Limits)
	}

	out, err := exec.Command(binPath, "--version").Output()
	if err != nil {
		t.Fatalf("embed-stack --version: %v", err)
	}
	want := buildinfo.Info{Version: info.Version, Commit: info.Commit, Modified: info.Modified, GoVersion: info.GoVersion}.String()
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("--version prints %q; /info says %q", got, want)
	}

	metrics := s.do(t, http.MethodGet, "/metrics", nil, nil)
	series := fmt.Sprintf(`embed_stack_build_info{commit=%q,goversion=%q,version=%q} 1`, info.Commit, info.GoVersion, info.Version)
	if !strings.Contains(string(metrics.body), series+"\n") {
		t.Errorf("/metrics lacks %s", series)
	}
}

// GET /openapi.json is OpenAPI 3.1 with this server's figures; GET /docs renders it
// without loading anything from elsewhere.
func TestOpenAPIAndDocs(t *testing.T) {
	s := truncServer(t)
	r := s.do(t, http.MethodGet, "/openapi.json", nil, nil)
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Version string `json:"version"`
		} `json:"info"`
		Paths      map[string]any `json:"paths"`
		Components struct {
			Schemas struct {
				Dimensions struct {
					Minimum, Maximum int
				}
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	var info infoResponse
	s.do(t, http.MethodGet, "/info", nil, nil).decode(t, &info)
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != info.Version || doc.Components.Schemas.Dimensions.Minimum != 32 || doc.Components.Schemas.Dimensions.Maximum != 64 {
		t.Errorf("openapi %q version %q (build %q) dimensions %+v", doc.OpenAPI, doc.Info.Version, info.Version, doc.Components.Schemas.Dimensions)
	}
	for _, p := range []string{"/v1/embeddings", "/embed", "/tokenize", "/info", "/docs"} {
		if doc.Paths[p] == nil {
			t.Errorf("no path %s", p)
		}
	}

	page := s.do(t, http.MethodGet, "/docs", nil, nil)
	if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs: %d %s", page.status, page.header.Get("Content-Type"))
	}
	html := string(page.body)
	if !strings.Contains(html, `fetch("openapi.json")`) {
		t.Error("/docs does not load openapi.json")
	}
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(html); ext != "" {
		t.Errorf("/docs loads something from elsewhere: %s", ext)
	}
}
