package llama

/*
#include "llama.h"

// Declared here, defined by the //export below. This file holds the only //export of
// the package, so its preamble may hold declarations only; the C helpers live in
// es.h, which this file must not include.
extern void embedStackLlamaLog(int level, char *text, void *user_data);
*/
import "C"

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"unsafe"
)

func init() {
	// ollama's packages point llama.cpp and ggml at their own callbacks, which print
	// INFO and up to stderr. This package's init runs after theirs (it imports them),
	// so this replaces both (llama_log_set also sets ggml's logger).
	C.llama_log_set(C.ggml_log_callback(C.embedStackLlamaLog), nil)
}

// lastError holds the most recent ERROR-level line llama.cpp logged. llama.cpp
// reports why a model failed to load only through its log (the C API returns NULL),
// so Open quotes this line in its error.
var lastError struct {
	mu  sync.Mutex // guards msg
	msg string
}

func takeLastError() string {
	lastError.mu.Lock()
	defer lastError.mu.Unlock()
	msg := lastError.msg
	lastError.msg = ""
	return msg
}

// embedStackLlamaLog routes llama.cpp and ggml log lines to slog at debug level: the
// worker is quiet by default and a --log-level debug shows everything llama.cpp says.
// It may be called from C threads that ggml started.
//
//export embedStackLlamaLog
func embedStackLlamaLog(level C.int, text *C.char, _ unsafe.Pointer) {
	isError := level == C.GGML_LOG_LEVEL_ERROR
	debug := slog.Default().Enabled(context.Background(), slog.LevelDebug)
	if !isError && !debug {
		return
	}
	msg := strings.TrimSpace(C.GoString(text))
	if msg == "" {
		return
	}
	if isError {
		lastError.mu.Lock()
		lastError.msg = msg
		lastError.mu.Unlock()
	}
	if debug {
		slog.Debug(msg, "source", "llama.cpp", "llama_level", logLevelName(level))
	}
}

func logLevelName(level C.int) string {
	switch level {
	case C.GGML_LOG_LEVEL_DEBUG:
		return "debug"
	case C.GGML_LOG_LEVEL_INFO:
		return "info"
	case C.GGML_LOG_LEVEL_WARN:
		return "warn"
	case C.GGML_LOG_LEVEL_ERROR:
		return "error"
	case C.GGML_LOG_LEVEL_CONT:
		return "cont"
	default:
		return "none"
	}
}

// llamaReason returns the last error llama.cpp logged, or hint when it logged none.
func llamaReason(hint string) string {
	if msg := takeLastError(); msg != "" {
		return "llama.cpp: " + msg
	}
	return hint
}
