// Package tokenizer turns text into token ids in the API server's own process,
// without the model weights, and decodes token ids of the two vocabularies clients
// send: Qwen3's own and tiktoken's cl100k_base (what LangChain sends by default).
//
// FromGGUF builds the tokenizer of the vocabulary a GGUF carries: byte-level BPE
// (Qwen3, below), WordPiece (BERT: wordpiece.go), SentencePiece Unigram (XLM-R, T5:
// unigram.go, charsmap.go) or SentencePiece BPE with byte fallback (EmbeddingGemma,
// Llama 2: spmbpe.go). Each must give the ids of the model's Hugging Face tokenizer
// with split_special_tokens=True; docs/tokenizers.md says how that is tested and the
// one deliberate difference (text never produces control ids).
//
// The Qwen3 tokenizer is a pure-Go reimplementation of Hugging Face's tokenizer.json
// pipeline for Qwen2/Qwen3, built from the vocabulary a GGUF file carries
// (tokenizer.ggml.tokens, token_type, merges). For every input it must give the ids
// Hugging Face gives with split_special_tokens=True; tokenizer/testdata/parity.json,
// produced by an independent implementation (tools/tokenizer-parity), is the proof.
// The pipeline, in HF's order:
//
//  1. added tokens: user-defined tokens (GGUF type 4, e.g. <think>) are cut out of the
//     raw text as single ids, leftmost match first and the longest at a position.
//     Control tokens (type 3, e.g. <|endoftext|>) are matched the same way but left in
//     the text, so a client can never inject them: "<|im_start|>" in user text is
//     tokenized as the characters it is made of;
//  2. NFC normalisation of each stretch of text between added tokens;
//  3. the Qwen2 pre-tokenizer regex, reproduced by a hand-written scanner because Go's
//     regexp has no lookahead (see pretokenize.go);
//  4. byte-level BPE of each piece with the merge ranks.
//
// Invalid UTF-8 cannot reach HF (it takes Rust strings), so Encode first replaces each
// maximal invalid subsequence by U+FFFD, exactly as Rust's String::from_utf8_lossy and
// the WHATWG decoder do, and tokenizes the result.
//
// The package knows nothing of HTTP, request limits or the Qwen3 query/document
// wrapping and end-of-text policy: those belong to package routing.
package tokenizer
