// Command tiktoken-cl100k writes Python tiktoken's cl100k_base vocabulary file into a
// tiktoken cache folder, from the vocabulary embed-stack itself decodes token ids
// with, so that tiktoken (and LangChain's OpenAIEmbeddings, which uses it by default)
// works on a machine that cannot download it:
//
//	go run ./tools/tiktoken-cl100k -dir DIR
//	export TIKTOKEN_CACHE_DIR=DIR
//
// The file is named as tiktoken names its cached download and has the SHA-256
// tiktoken checks; an existing file with that hash is left alone.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/embed-stack/embed-stack/tokenizer"
)

func main() {
	dir := flag.String("dir", "", "tiktoken cache `folder` (what TIKTOKEN_CACHE_DIR names), created if missing")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: tiktoken-cl100k -dir DIR")
		os.Exit(2)
	}
	path, err := write(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tiktoken-cl100k:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

func write(dir string) (string, error) {
	path := filepath.Join(dir, tokenizer.Cl100kTiktokenCacheKey)
	if old, err := os.ReadFile(path); err == nil && hexSHA256(old) == tokenizer.Cl100kTiktokenSHA256 {
		return path, nil
	}
	var b bytes.Buffer
	if err := tokenizer.WriteCl100kTiktoken(&b); err != nil {
		return "", err
	}
	if got := hexSHA256(b.Bytes()); got != tokenizer.Cl100kTiktokenSHA256 {
		return "", fmt.Errorf("the vocabulary has sha256 %s, not the %s tiktoken requires", got, tokenizer.Cl100kTiktokenSHA256)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Written aside and renamed, so a concurrent reader never sees half a file.
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
