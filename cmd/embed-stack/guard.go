package main

import (
	"fmt"

	"github.com/embed-stack/embed-stack/server"
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
		if err := server.CheckAPIKey(k); err != nil {
			return fmt.Errorf("--api-key #%d: %w", i+1, err)
		}
	}
	return nil
}
