package tokenizer

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Cl100kTiktokenCacheKey is the name Python's tiktoken gives its cached copy of the
// cl100k_base vocabulary file: the SHA-1 of the URL it downloads the file from. A
// file of that name in TIKTOKEN_CACHE_DIR is used without any download.
const Cl100kTiktokenCacheKey = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"

// Cl100kTiktokenSHA256 is the SHA-256 tiktoken requires of that file; a cached file
// with another hash is deleted and downloaded again.
const Cl100kTiktokenSHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

// WriteCl100kTiktoken writes the cl100k_base vocabulary in tiktoken's own file format,
// one ordinary token per line in rank order: its bytes in base64, a space, its id.
// The result is byte for byte the file Python's tiktoken (and so LangChain's
// OpenAIEmbeddings) downloads on first use, built from the vocabulary the server
// decodes token ids with, so that machines which cannot reach that download (CI,
// air-gapped users) can put it in TIKTOKEN_CACHE_DIR under Cl100kTiktokenCacheKey.
// Special tokens are not part of the file; tiktoken adds them itself.
func WriteCl100kTiktoken(w io.Writer) error {
	pieces, err := cl100kPieces()
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	buf := make([]byte, 0, 64)
	for id, piece := range pieces[:cl100kOrdinary] {
		buf = base64.StdEncoding.AppendEncode(buf[:0], []byte(piece))
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, int64(id), 10)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteCl100kTiktokenCache writes the cl100k_base file into dir (created if
// missing), the folder TIKTOKEN_CACHE_DIR names, under Cl100kTiktokenCacheKey, and
// returns its path. A file already there with Cl100kTiktokenSHA256 is kept; the new
// one is written aside and renamed, so a concurrent reader never sees half of it.
func WriteCl100kTiktokenCache(dir string) (string, error) {
	path := filepath.Join(dir, Cl100kTiktokenCacheKey)
	if old, err := os.ReadFile(path); err == nil && hexSHA256(old) == Cl100kTiktokenSHA256 {
		return path, nil
	}
	var b bytes.Buffer
	if err := WriteCl100kTiktoken(&b); err != nil {
		return "", err
	}
	if got := hexSHA256(b.Bytes()); got != Cl100kTiktokenSHA256 {
		return "", fmt.Errorf("the cl100k vocabulary has sha256 %s, not the %s tiktoken requires", got, Cl100kTiktokenSHA256)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".cl100k-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
