package gguf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Digest returns the sha256 of the file at path, in hex: a model file's identity
// (Ollama's digest in /api/tags, TEI's model_sha, the key of an embedding cache
// that must never return another file's vectors).
//
// Hashing reads the whole file (about 1 s per GB here). With cacheDir set, the
// result is kept there under the file's absolute path, with its size and
// modification time, and read back instead of hashing again while those two are
// unchanged; a file rewritten in place within the same second and at the same size
// would keep its old digest, which is the trade every build cache makes. The cache
// is best-effort: a cacheDir that cannot be written only costs the next hash.
func Digest(path, cacheDir string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("gguf: %w", err)
	}
	type entry struct {
		Path    string `json:"path"`
		Size    int64  `json:"size"`
		ModTime int64  `json:"mtime_ns"`
		SHA256  string `json:"sha256"`
	}
	want := entry{Path: abs, Size: st.Size(), ModTime: st.ModTime().UnixNano()}
	var cached string
	if cacheDir != "" {
		sum := sha256.Sum256([]byte(abs))
		cached = filepath.Join(cacheDir, hex.EncodeToString(sum[:16])+".json")
		var e entry
		if b, err := os.ReadFile(cached); err == nil && json.Unmarshal(b, &e) == nil &&
			e.Path == want.Path && e.Size == want.Size && e.ModTime == want.ModTime && len(e.SHA256) == 64 {
			return e.SHA256, nil
		}
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", fmt.Errorf("gguf: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("gguf: hashing %s: %w", abs, err)
	}
	want.SHA256 = hex.EncodeToString(h.Sum(nil))
	if cached != "" {
		if b, err := json.Marshal(want); err == nil && os.MkdirAll(cacheDir, 0o755) == nil {
			tmp := cached + ".tmp"
			if os.WriteFile(tmp, b, 0o644) == nil {
				_ = os.Rename(tmp, cached)
			}
		}
	}
	return want.SHA256, nil
}

// Parameters is the number of values in all tensors: a model's parameter count.
func (f *File) Parameters() uint64 {
	var n uint64
	for _, t := range f.tensors {
		n += t.Elements()
	}
	return n
}

// WeightType is the type that holds most of the values of the file's matrices
// (tensors of two or more dimensions): F16 for an F16 export whose norms are F32,
// Q8_0 for a Q8_0 quantization. It is F32 for a file without matrices.
func (f *File) WeightType() GGMLType {
	count := map[GGMLType]uint64{}
	for _, t := range f.tensors {
		if len(t.Dims) >= 2 {
			count[t.Type] += t.Elements()
		}
	}
	best := TypeF32
	for typ, n := range count {
		if n > count[best] || n == count[best] && typ < best {
			best = typ
		}
	}
	return best
}
