package server

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// CheckAPIKey refuses keys a client could not send in a Bearer header as given.
func CheckAPIKey(k string) error {
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

// LoadAPIKeys returns the keys (Config.APIKeys) of --api-key and of --api-key-file together. The
// file holds one key per line; blank lines and lines starting with # are skipped. A
// file others can read is used but warned about: it holds secrets.
func LoadAPIKeys(keys []string, file string, logger *slog.Logger) ([]string, error) {
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
		if err := CheckAPIKey(k); err != nil {
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
