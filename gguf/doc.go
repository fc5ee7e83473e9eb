// Package gguf reads and writes GGUF files (version 3, little-endian): the metadata
// key/value pairs, the tensor index and the raw tensor data, as llama.cpp's ggml
// reads and writes them.
//
// Reading never loads tensor data eagerly: Open parses the header, metadata and tensor
// index, and tensor bytes are read on demand through io.SectionReader, so a
// multi-gigabyte model costs only its metadata in memory. Every count and length in a
// file is checked against the bytes the file actually holds before anything is
// allocated, so a corrupt or hostile file gives an error naming the key or tensor
// rather than an out-of-memory crash.
//
// Writing streams: each tensor's bytes come from a callback at write time, so a
// generator never holds a whole model in memory, and the file appears atomically.
//
// The package knows the container format and how to (de)quantise a few tensor types
// (F32, F16, BF16, F64, Q8_0). Of what the keys mean it knows one thing, a model's
// Shape: the hyperparameter keys llama.cpp's converter writes for every architecture
// (layers, heads, head sizes, context, pooling, vocabulary type), read once, typed and
// with llama.cpp's defaults, so that no caller parses them again. It refuses to know
// how a model computes: architectures' graphs, tokenizers and llama.cpp are its
// callers' business.
package gguf
