package served

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/server"
)

// modelFile reads what the Ollama and TEI APIs report about a GGUF (size, time,
// architecture, weight type, parameter count) and starts hashing it in the
// background: its sha256 is Ollama's digest and TEI's model_sha. The hash is kept
// in the user's cache folder (gguf.Digest), so a file is read whole once, not at
// every start.
func modelFile(path string, logger *slog.Logger) server.ModelFile {
	var mf server.ModelFile
	if st, err := os.Stat(path); err == nil {
		mf.Size, mf.Modified = st.Size(), st.ModTime()
	}
	if f, err := gguf.Open(path); err == nil {
		mf.Architecture, _ = f.String("general.architecture")
		if n, err := f.Uint32(mf.Architecture + ".context_length"); err == nil {
			mf.ContextLength = int(n)
		}
		mf.FileType = f.WeightType().String()
		mf.Parameters = int64(f.Parameters())
		f.Close()
	}
	var (
		mu     sync.Mutex
		digest string
	)
	go func() {
		start := time.Now()
		d, err := gguf.Digest(path, DigestCacheDir())
		if err != nil {
			logger.Warn("cannot hash the model file; /api/tags and /info report no digest", "model", path, "err", err)
			return
		}
		logger.Debug("model file hashed", "model", path, "sha256", d, "duration", time.Since(start).Round(time.Millisecond))
		mu.Lock()
		digest = d
		mu.Unlock()
	}()
	mf.Digest = func() string {
		mu.Lock()
		defer mu.Unlock()
		return digest
	}
	return mf
}

// DigestCacheDir is where model digests are kept (gguf.Digest's cache), serve's
// and embed's alike: the user's cache folder
// ($XDG_CACHE_HOME or ~/.cache on Linux), or none when there is no such folder.
func DigestCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "embed-stack", "digests")
}
