// Package hub turns a model reference into a local GGUF path: either a file that
// already exists, or a Hugging Face Hub reference such as
// Qwen/Qwen3-Embedding-0.6B-GGUF:Q8_0 that it downloads into the standard Hugging Face
// cache, so that huggingface_hub, llama.cpp and other tools reuse the same files.
//
// A reference is one of
//
//	path/to/model.gguf                     an existing local file, returned as is
//	owner/name[:QUANT][@REVISION]          a repository; QUANT (case-insensitive, e.g.
//	                                       Q8_0, f16) picks one of its .gguf files
//	owner/name/FILE.gguf[@REVISION]        one exact file of a repository
//
// With no QUANT the F16 file is preferred (the fastest on CPUs with AVX2 and a GPU's
// native type; :Q8_0 takes half the memory), else the only .gguf file; anything else is
// an error listing the choices. REVISION is a branch, tag or commit and defaults to main.
//
// The download follows huggingface_hub: the file list comes from the Hub API, a HEAD
// request on the resolve URL (not following the redirect to the CDN) gives the commit,
// the ETag (the blob's sha256 for LFS files) and the size, and the file is fetched
// through the resolve URL's redirect into blobs/{etag}.incomplete, resumed with a Range
// request after an interruption, checked against the sha256 and then linked from
// snapshots/{commit}/{file}; refs/{revision} records the commit. A blob is locked with
// flock on .locks/…/{etag}.lock as huggingface_hub's filelock does, so concurrent
// downloads of one file, by this package or by Python tools, wait for each other.
//
// The package knows the Hub's HTTP surface and its cache layout. It refuses to know
// about GGUF contents, flags or the command line: environment variables are read only by
// OptionsFromEnv, which the command calls, and the path it returns is opened by others.
package hub
