package main

import (
	"fmt"

	"github.com/embed-stack/embed-stack/gguf"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/tokenizer"
)

// Values of --task.
const (
	taskAuto   = "auto"
	taskEmbed  = "embed"
	taskRerank = "rerank"
)

// parseTask checks a --task value.
func parseTask(s string) (string, error) {
	switch s {
	case "", taskAuto:
		return taskAuto, nil
	case taskEmbed, taskRerank:
		return s, nil
	}
	return "", fmt.Errorf("--task %q is not one of auto, embed, rerank", s)
}

// modelTask decides whether a model is served as a reranker. --task embed and
// rerank say so. auto takes a GGUF for a reranker when it is laid out as llama.cpp's
// conversion writes a Qwen3-Reranker: rank pooling declared, or a classifier head
// (cls.output.weight). A Qwen3-Reranker converted as a plain causal LM looks like
// any Qwen3 model and needs --task rerank.
func modelTask(task string, s gguf.Shape) (bool, error) {
	t, err := parseTask(task)
	if err != nil {
		return false, err
	}
	switch t {
	case taskEmbed:
		return false, nil
	case taskRerank:
		return true, nil
	}
	return s.HasClassifier || s.Pooling == gguf.PoolingRank, nil
}

// checkRerankVocab checks that the vocabulary holds the reranker template's control
// tokens at the ids routing writes them as.
func checkRerankVocab(tok *tokenizer.Tokenizer) error {
	for _, ct := range []struct {
		text string
		id   int32
	}{{"<|im_start|>", routing.ImStart}, {"<|im_end|>", routing.ImEnd}, {"<think>", routing.Think}, {"</think>", routing.ThinkEnd}} {
		if id, ok := tok.TokenID(ct.text); !ok || id != ct.id {
			return fmt.Errorf("its vocabulary has no %s token at id %d, which the Qwen3-Reranker template needs; embed-stack reranks with Qwen3-Reranker models", ct.text, ct.id)
		}
	}
	return nil
}

// infoTask names the model's task in GET /info.
func infoTask(rerank bool) string {
	if rerank {
		return "rerank"
	}
	return "embedding"
}
