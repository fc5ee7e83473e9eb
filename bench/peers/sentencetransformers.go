package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// STServerScript is server.py's path in the repository.
const STServerScript = "bench/peers/sentence_transformers/server.py"

// SentenceTransformers starts sentence-transformers on torch's CPU backend behind an
// OpenAI-compatible /v1/embeddings: Script (sentence_transformers/server.py) run by
// Python (the venv of `make bench-st`) on the original checkpoint the GGUF was
// converted from. Requests run one at a time, each one forward pass of its texts, as
// SentenceTransformer.encode does; see server.py.
type SentenceTransformers struct {
	// Python runs Script; Model is the sentence-transformers checkpoint folder
	// (modules.json, the weights, the tokenizer, 1_Pooling).
	Python, Script, Model string
	// Threads is torch.set_num_threads: the count every other contender gets.
	Threads int
	// MaxSeqLength is the model's max_seq_length (0: 512, what BERT's position
	// embeddings hold, so that it embeds what a GGUF server does rather than
	// truncating at the checkpoint's 256).
	MaxSeqLength int
	// ReadyTimeout bounds start-up (0: 5 minutes; importing torch takes a while).
	ReadyTimeout time.Duration
}

// stHealth is server.py's GET /health.
type stHealth struct {
	Threads      int               `json:"threads"`
	MaxSeqLength int               `json:"max_seq_length"`
	Versions     map[string]string `json:"versions"`
}

// Start starts the server and waits for its first 200. Its cold start includes
// importing torch and loading the checkpoint.
func (s SentenceTransformers) Start(ctx context.Context) (*Process, error) {
	if s.Threads <= 0 {
		return nil, fmt.Errorf("peers: sentence-transformers needs a thread count (the one every contender gets)")
	}
	maxSeq := s.MaxSeqLength
	if maxSeq == 0 {
		maxSeq = 512
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{s.Script, "--model", s.Model, "--addr", addr, "--threads", strconv.Itoa(s.Threads), "--max-seq-length", strconv.Itoa(maxSeq)}
	cmd := exec.Command(s.Python, args...)
	// The checkpoint is a local folder: nothing may be fetched from a hub, and the
	// thread count is torch.set_num_threads's alone.
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "PYTHONUNBUFFERED=1", "TOKENIZERS_PARALLELISM=false")
	began := time.Now()
	p, err := start("sentence-transformers", cmd)
	if err != nil {
		return nil, err
	}
	p.BaseURL, p.Model = "http://"+addr+"/v1", filepath.Base(s.Model)
	if err := p.waitFirst200(ctx, orDuration(s.ReadyTimeout, 5*time.Minute)); err != nil {
		p.Stop()
		return nil, err
	}
	p.ColdStart = time.Since(began)
	var h stHealth
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	if resp, err := c.Get("http://" + addr + "/health"); err == nil {
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err != nil {
			h = stHealth{}
		}
	}
	p.About = fmt.Sprintf("sentence-transformers %s, torch %s (CPU), transformers %s, Python %s: %s on %s, torch.set_num_threads(%d), max_seq_length %d, one request at a time, one forward pass per request",
		orUnknown(h.Versions["sentence_transformers"]), orUnknown(h.Versions["torch"]), orUnknown(h.Versions["transformers"]), orUnknown(h.Versions["python"]),
		strings.Join(redactPaths([]string{s.Script}), ""), filepath.Base(s.Model), h.Threads, h.MaxSeqLength)
	return p, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
