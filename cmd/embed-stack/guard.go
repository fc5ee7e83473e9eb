package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// checkGuardFlags validates serve's robustness and security flags (--api-key,
// --max-concurrent-requests, --request-timeout, --max-header-bytes, the body,
// write and header timeouts, --max-connections, --worker-hang-timeout).
func checkGuardFlags(f *serveFlags) error {
	switch {
	case f.maxConcurrent < 1:
		return fmt.Errorf("--max-concurrent-requests must be at least 1; got %d", f.maxConcurrent)
	case f.requestTimeout <= 0:
		return fmt.Errorf("--request-timeout must be positive; got %s", f.requestTimeout)
	case f.maxHeaderBytes < 1024:
		return fmt.Errorf("--max-header-bytes must be at least 1024; got %d", f.maxHeaderBytes)
	case f.bodyTimeout <= 0 || f.writeStall <= 0 || f.headerTimeout <= 0:
		return fmt.Errorf("--body-timeout, --write-stall-timeout and --header-timeout must be positive; got %s, %s, %s", f.bodyTimeout, f.writeStall, f.headerTimeout)
	case f.maxConnections < 1:
		return fmt.Errorf("--max-connections must be at least 1; got %d", f.maxConnections)
	case f.workerHangTimeout < 0:
		return fmt.Errorf("--worker-hang-timeout must not be negative (0 turns hang detection off); got %s", f.workerHangTimeout)
	}
	for i, k := range f.apiKeys {
		if err := checkAPIKey(k); err != nil {
			return fmt.Errorf("--api-key #%d: %w", i+1, err)
		}
	}
	return nil
}

// checkAPIKey refuses keys a client could not send in a Bearer header as given.
func checkAPIKey(k string) error {
	switch {
	case k == "":
		return errors.New("the key is empty")
	case strings.TrimSpace(k) != k:
		return errors.New("the key starts or ends with white space, which a Bearer header cannot carry")
	case strings.ContainsAny(k, "\r\n\x00"):
		return errors.New("the key holds a line break or NUL")
	}
	return nil
}

// loadAPIKeys returns the keys of --api-key and of --api-key-file together. The
// file holds one key per line; blank lines and lines starting with # are skipped. A
// file others can read is used but warned about: it holds secrets.
func loadAPIKeys(keys []string, file string, logger *slog.Logger) ([]string, error) {
	out := append([]string(nil), keys...)
	if file == "" {
		return out, nil
	}
	fh, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
		logger.Warn("the API key file is readable by other users; chmod 600 it", "file", file, "mode", st.Mode().Perm())
	}
	sc := bufio.NewScanner(fh)
	n := 0
	for line := 1; sc.Scan(); line++ {
		k := strings.TrimSpace(sc.Text())
		if k == "" || strings.HasPrefix(k, "#") {
			continue
		}
		if err := checkAPIKey(k); err != nil {
			return nil, fmt.Errorf("--api-key-file %s line %d: %w", file, line, err)
		}
		out = append(out, k)
		n++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--api-key-file %s: %w", file, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("--api-key-file %s holds no key (one per line; # starts a comment): refusing to start without the authentication it asks for", file)
	}
	return out, nil
}
