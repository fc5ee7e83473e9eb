package tokenizer

import (
	"fmt"

	"github.com/embed-stack/embed-stack/gguf"
)

// GGUF metadata keys of a tokenizer, as llama.cpp's converter writes them.
const (
	keyModel  = gguf.KeyTokenizerModel
	keyPre    = "tokenizer.ggml.pre"
	keyTokens = gguf.KeyTokens
	keyTypes  = "tokenizer.ggml.token_type"
	keyMerges = "tokenizer.ggml.merges"
)

// qwenUserDefined are the added tokens of Qwen2.5 and Qwen3 that tokenizer.json marks
// "special": false although they are spelt like control tokens.
var qwenUserDefined = map[string]bool{
	"<|fim_prefix|>": true,
	"<|fim_middle|>": true,
	"<|fim_suffix|>": true,
	"<|fim_pad|>":    true,
	"<|repo_name|>":  true,
	"<|file_sep|>":   true,
}

// FromGGUF builds the tokenizer stored in a GGUF file's metadata, so the API server can
// tokenize with exactly the model's vocabulary without loading its weights. It accepts
// only what it implements: tokenizer.ggml.model "gpt2" (byte-level BPE) with
// tokenizer.ggml.pre "qwen2", the pre-tokenizer of Qwen2 and Qwen3.
//
// One correction is applied: llama.cpp's converter (convert_hf_to_gguf.py,
// does_token_look_special) types every added token spelt <|...|> as control, including
// the six that Qwen's tokenizer.json does not call special (qwenUserDefined). HF cuts
// those out of user text as single ids, so FromGGUF types them user-defined again;
// otherwise "<|fim_prefix|>" in a request would tokenize differently from HF.
func FromGGUF(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()

	model, err := f.String(keyModel)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if gguf.VocabType(model) != gguf.VocabBPE {
		return nil, fmt.Errorf("tokenizer: %s: %s is %q; only byte-level BPE (\"gpt2\", as in Qwen2 and Qwen3 models) is implemented", path, keyModel, model)
	}
	pre, err := f.String(keyPre)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w (the pre-tokenizer must be named; only \"qwen2\" is implemented)", path, err)
	}
	if pre != "qwen2" {
		return nil, fmt.Errorf("tokenizer: %s: %s is %q; only Qwen2/Qwen3's pre-tokenizer (\"qwen2\") is implemented", path, keyPre, pre)
	}
	var v Vocab
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if v.Types, err = f.Int32s(keyTypes); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if v.Merges, err = f.Strings(keyMerges); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if len(v.Types) == len(v.Tokens) {
		for i, tok := range v.Tokens {
			if v.Types[i] == TokenControl && qwenUserDefined[tok] {
				v.Types[i] = TokenUserDefined
			}
		}
	}
	t, err := New(v)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return t, nil
}
