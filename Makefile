# embed-stack build. `make` builds bin/embed-stack; `make test` runs every test; `make unit`
# runs the unit tests of the pure-Go packages in well under a minute (the inner loop).
#
# The llama.cpp adapter (backends/llama) is the only cgo package. It needs:
#   - Debian: nlohmann-json3-dev, libstb-dev (headers llama.cpp's vendor/ folder would
#     carry; the ollama module zip omits that folder), `make deps` installs them;
#   - our stand-in miniaudio header (backends/llama/include), since audio decoding is
#     never used;
#   - llama.h from the ollama module. On a fresh machine the module is not in the Go
#     module cache yet, so it is downloaded (`go mod download`) before `go list -m`
#     resolves its directory; when that fails the build stops here, naming the fix,
#     instead of passing include paths rooted at / to the compiler.
# macOS: `brew install nlohmann-json` and put stb_image.h on the include path (or
# set EXTRA_CPPFLAGS=-I/path/to/stb-parent); on Apple Silicon ggml's Metal backend is
# compiled in (the ollama module enables it for darwin/arm64). NVIDIA GPUs: `make cuda`.

GO          ?= go
OLLAMA_MOD  := github.com/ollama/ollama

# Goals that neither compile nor describe the cgo package never resolve the module: they
# start at once and run offline (`make unit`, `make models`; deps installs the system
# packages a later build needs; clean removes bin/). Any other goal, a new one included,
# resolves it while make reads this file, and stops here when it cannot, naming the fix,
# instead of passing include paths rooted at / to the compiler.
NO_CGO_GOALS := deps clean unit test-pure models tokenizer bench-model bench-st fuzz
ifneq ($(filter-out $(NO_CGO_GOALS),$(or $(MAKECMDGOALS),all)),)
OLLAMA_DIR  := $(shell $(GO) mod download $(OLLAMA_MOD) >/dev/null 2>&1; $(GO) list -m -f '{{.Dir}}' $(OLLAMA_MOD) 2>/dev/null)
LLAMA_H     := $(OLLAMA_DIR)/llama/llama.cpp/include/llama.h
ifeq ($(wildcard $(LLAMA_H)),)
$(error cannot find llama.h of $(OLLAMA_MOD) (module directory: "$(OLLAMA_DIR)"). \
`$(GO) mod download $(OLLAMA_MOD)` must succeed first: check the network or GOPROXY \
(GOPROXY=$(shell $(GO) env GOPROXY), GOFLAGS=$(shell $(GO) env GOFLAGS)), then run make again)
endif
endif

# CPU flags: ggml's CPU kernels are compiled by cgo, and without -march they target
# baseline x86-64 (no AVX), about 4x slower here. `native` suits a binary built and run
# on the same machine; for a portable build use e.g. `make MARCH=x86-64-v3`.
MARCH       ?= native
# AMX stays off in the compiled-in CPU backend on x86: `-march=native` on an Intel Xeon
# with AMX (Sapphire Rapids and later), or `-march=sapphirerapids`, defines __AMX_INT8__,
# and ggml-cpu.cpp then calls ggml_backend_amx_buffer_type(), whose sources
# (ggml-cpu/amx/) sit in a folder cgo never compiles: the link fails. AMX kernels come
# from the CPU variant libraries instead (docs/building.md). OPT is the optimisation
# level alone (deploy's link test builds at -O0 to save minutes; the macros -march
# defines, and so the link, do not depend on it).
GOARCH_T    := $(shell $(GO) env GOARCH 2>/dev/null)
NO_AMX      := $(if $(filter amd64,$(GOARCH_T)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
OPT         ?= -O3
OPT_FLAGS   := $(strip $(OPT) -march=$(MARCH) $(NO_AMX))

export CGO_ENABLED  := 1
# The stand-in headers' folder is part of CGO_CPPFLAGS and so of every cgo build-cache
# key: several checkouts (git worktrees) can share one llama.cpp build by pointing
# STANDIN_INCLUDE at the same folder. ggml's src folder gives backends/llama/accel.c
# ggml-backend-impl.h, the interface a ggml backend implements.
STANDIN_INCLUDE ?= $(CURDIR)/backends/llama/include

export CGO_CPPFLAGS := $(strip -I$(STANDIN_INCLUDE) -I$(OLLAMA_DIR)/llama/llama.cpp/include -I$(OLLAMA_DIR)/ml/backend/ggml/ggml/include -I$(OLLAMA_DIR)/ml/backend/ggml/ggml/src $(EXTRA_CPPFLAGS))
export CGO_CFLAGS   := $(OPT_FLAGS)
export CGO_CXXFLAGS := $(OPT_FLAGS)

# Packages that must build without cgo (everything but the llama.cpp adapter and the
# binary that links it). `go list -find` names them without loading their imports: 0.7 s
# instead of 2.3 s, paid by every make run that expands the list.
PURE_PKGS    = $(shell $(GO) list -find ./... | grep -v -e /backends/llama -e /cmd/embed-stack)

MODELS_DIR   ?= models
TINY_MODEL   := $(MODELS_DIR)/tiny.gguf
TINY_RERANKER := $(MODELS_DIR)/tiny-reranker.gguf
BENCH_MODEL  := $(MODELS_DIR)/qwen3-0.6b-f16.gguf
TOKENIZER    := .cache/qwen3/tokenizer.json

# The model `make run` serves: by default the official Qwen3-Embedding-0.6B GGUF in F16
# (about 1.2 GB, the faster on AVX2 CPUs; :Q8_0 takes half the memory), downloaded once
# into the Hugging Face cache (HF_HOME / HF_HUB_CACHE; HF_ENDPOINT and HF_TOKEN apply).
# Override with a local file, e.g. MODEL=models/tiny.gguf (the random-weight test model,
# built on demand), or another Hub reference.
MODEL        ?= Qwen/Qwen3-Embedding-0.6B-GGUF:f16
ADDR         ?= 127.0.0.1:8080

.PHONY: all build portable dist test-dist cuda cpu-variants cpu-variant-test bf16-rate cgo-env deps tokenizer encoders test-tokenizers models bench-model bench bench-peers bench-st bench-minilm bench-encoder run test unit test-go test-pure test-node test-openapi test-python test-cohere test-integrations test-scale soak-cache vet clean fuzz vulncheck conformance-worker conformance-mlx
all: build

# The version and commit `embed-stack --version`, /info and the build_info metric report
# (internal/buildinfo). The commit is stamped here rather than left to the toolchain's VCS
# stamp, which GOFLAGS=-buildvcs=false turns off.
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS     := -X github.com/embed-stack/embed-stack/internal/buildinfo.Version=$(VERSION) \
               -X github.com/embed-stack/embed-stack/internal/buildinfo.Commit=$(COMMIT) \
               -X github.com/embed-stack/embed-stack/internal/buildinfo.CPUBaseline=$(MARCH)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/embed-stack ./cmd/embed-stack

# System packages for the cgo build and the node and Python client tests (Debian; run
# as root). python3-venv is Debian's ensurepip, which `python3 -m venv` needs; haproxy
# is the scale test's balancer, chromium the headless browser of the /docs page's test.
deps:
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends nlohmann-json3-dev libstb-dev
	@command -v node >/dev/null || apt-get install -y -qq --no-install-recommends nodejs npm
	@python3 -c 'import ensurepip' 2>/dev/null || apt-get install -y -qq --no-install-recommends python3 python3-venv
	@command -v haproxy >/dev/null || apt-get install -y -qq --no-install-recommends haproxy
	@command -v cmake >/dev/null || apt-get install -y -qq --no-install-recommends cmake
	@[ "$$(dpkg --print-architecture)" != amd64 ] || command -v aarch64-linux-gnu-g++ >/dev/null || apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu
	@command -v chromium >/dev/null || apt-get install -y -qq --no-install-recommends chromium
	@command -v unzip >/dev/null || apt-get install -y -qq --no-install-recommends unzip

$(TOKENIZER):
	bash scripts/fetch-tokenizer.sh

tokenizer: $(TOKENIZER)

# The real encoder files (all-MiniLM-L6-v2's checkpoint and WordPiece tokenizer.json,
# XLM-R's Unigram and Llama 2's SentencePiece BPE vocabularies as GGUFs), pinned by
# sha256: scripts/fetch-encoders.sh.
ENCODERS := .cache/minilm/model.safetensors .cache/xlmr/ggml-vocab-nomic-bert-moe.gguf .cache/llama-spm/ggml-vocab-llama-spm.gguf
$(ENCODERS) &:
	bash scripts/fetch-encoders.sh

encoders: $(ENCODERS)

# Cross-encoders (pooling type rank, the pooler and a one-output classifier): BERT with
# MiniLM's WordPiece and two token types, XLM-R's Unigram with one; the rerankers of
# backends/llama/testdata/crossencoder-reference.json and crossencoder-xlmr-reference.json.
# The other architectures whose cross-encoders llama.cpp scores (family.RankHead), with
# MiniLM's WordPiece: jina-bert-v2 with its one-row classifier and two token types (a
# jina-reranker-v1), neo-bert with the pooler and classifier.
BERT_RERANKER := $(MODELS_DIR)/bert-reranker-tiny.gguf
XLMR_RERANKER := $(MODELS_DIR)/xlmr-reranker-tiny.gguf
RERANK_ARCHS  := jina-bert-v2 neo-bert
ARCH_RERANKERS := $(foreach a,$(RERANK_ARCHS),$(MODELS_DIR)/$(a)-reranker-tiny.gguf)

# Hugging Face's tokenizers (PyPI), the reference of the WordPiece and Unigram
# tokenizers, in a virtual environment of tools/hf-tokenizers/requirements.txt
# (every package pinned, installed without their own dependencies).
HF_VENV  ?= .cache/venv-hf
HF_REQS  := tools/hf-tokenizers/requirements.txt

$(HF_VENV)/installed: $(HF_REQS)
	rm -rf $(HF_VENV)
	python3 -m venv $(HF_VENV)
	$(HF_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r $(HF_REQS)
	touch $@

# transformers' converters and sentencepiece, the reference of the SentencePiece BPE
# tokenizer (tools/hf-tokenizers/spm_bpe.py), in a virtual environment of their own.
SPM_VENV ?= .cache/venv-spm
SPM_REQS := tools/hf-tokenizers/requirements-spm.txt

$(SPM_VENV)/installed: $(SPM_REQS)
	rm -rf $(SPM_VENV)
	python3 -m venv $(SPM_VENV)
	$(SPM_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r $(SPM_REQS)
	touch $@

# The live comparison with HF: its character classes (tokenizer/bert_tables.go) and the
# ids of the committed parity files must still be what HF gives, and the MiniLM
# reference vectors what the numpy forward pass of the real checkpoint gives
# (docs/tokenizers.md). go test ./tokenizer and ./backends/llama then hold the Go
# tokenizers and llama.cpp to those files.
test-tokenizers: $(ENCODERS) $(HF_VENV)/installed $(SPM_VENV)/installed $(BERT_RERANKER) $(XLMR_RERANKER)
	$(HF_VENV)/bin/python tools/hf-tokenizers/tables.py --check
	$(HF_VENV)/bin/python tools/hf-tokenizers/parity.py --check
	$(SPM_VENV)/bin/python tools/hf-tokenizers/spm_bpe.py parity llama --check
	$(HF_VENV)/bin/python tools/hf-tokenizers/minilm_reference.py --check
	$(HF_VENV)/bin/python tools/hf-tokenizers/crossencoder_reference.py --check

# Random-weight Qwen3 GGUFs carrying the real vocabulary (fixed seed: identical files
# on every machine). tiny is for tests; the 0.6B shape for benchmarks.
$(TINY_MODEL): $(TOKENIZER)
	$(GO) run ./cmd/genmodel -tokenizer $(TOKENIZER) -shape tiny -out $@

# The same shape as a Qwen3-Reranker, laid out as llama.cpp converts one (pooling type
# rank, a two-row yes/no head in cls.output.weight).
$(TINY_RERANKER): $(TOKENIZER)
	$(GO) run ./cmd/genmodel -tokenizer $(TOKENIZER) -shape tiny -task rerank -out $@

$(BENCH_MODEL): $(TOKENIZER)
	$(GO) run ./cmd/genmodel -tokenizer $(TOKENIZER) -shape 0.6b -out $@

# Encoders (issue 25): BERT-shaped random-weight GGUFs carrying real vocabularies
# (all-MiniLM-L6-v2's WordPiece, XLM-R's Unigram), and the real all-MiniLM-L6-v2
# converted to GGUF in F32 and F16 (docs/tokenizers.md).
BERT_TINY   := $(MODELS_DIR)/bert-tiny.gguf
XLMR_TINY   := $(MODELS_DIR)/xlmr-tiny.gguf
MINILM_F32  := $(MODELS_DIR)/minilm-f32.gguf
MINILM_F16  := $(MODELS_DIR)/minilm-f16.gguf
# BERT-large's shape (bge-large-en-v1.5, mxbai-embed-large-v1, e5-large-v2), random
# weights and MiniLM's vocabulary: the encoder benchmark's model (bench-encoder).
BERT_LARGE  := $(MODELS_DIR)/bert-large-f16.gguf
# Every other encoder architecture embed-stack serves, random weights at the tiny
# shape: WordPiece (MiniLM's) for the BERT-vocabulary families, XLM-R's Unigram for
# the others.
WPM_ARCHS := nomic-bert jina-bert-v2 neo-bert
UGM_ARCHS := nomic-bert-moe jina-bert-v3 t5encoder
# gemma-embedding carries the SentencePiece BPE test vocabulary, written as llama.cpp
# writes EmbeddingGemma's (tokenizer/testdata/spm-bpe-vocab.gguf, docs/tokenizers.md).
SPM_VOCAB := tokenizer/testdata/spm-bpe-vocab.gguf
GEMMA_TINY := $(MODELS_DIR)/gemma-embedding-tiny.gguf
ARCH_MODELS := $(foreach a,$(WPM_ARCHS) $(UGM_ARCHS),$(MODELS_DIR)/$(a)-tiny.gguf) $(GEMMA_TINY)
ENCODER_MODELS := $(BERT_TINY) $(BERT_RERANKER) $(XLMR_RERANKER) $(ARCH_RERANKERS) $(XLMR_TINY) $(MINILM_F32) $(MINILM_F16) $(ARCH_MODELS)

$(foreach a,$(WPM_ARCHS),$(MODELS_DIR)/$(a)-tiny.gguf): $(MODELS_DIR)/%-tiny.gguf: $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch $* -shape tiny -tokenizer .cache/minilm/tokenizer.json -out $@

$(foreach a,$(UGM_ARCHS),$(MODELS_DIR)/$(a)-tiny.gguf): $(MODELS_DIR)/%-tiny.gguf: $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch $* -shape tiny -vocab-gguf .cache/xlmr/ggml-vocab-nomic-bert-moe.gguf -out $@

$(GEMMA_TINY): $(SPM_VOCAB)
	$(GO) run ./cmd/genmodel -arch gemma-embedding -shape tiny -vocab-gguf $(SPM_VOCAB) -out $@

$(BERT_TINY): $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch bert -shape tiny -tokenizer .cache/minilm/tokenizer.json -out $@

$(BERT_RERANKER): $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch bert -task rerank -shape tiny -tokenizer .cache/minilm/tokenizer.json -out $@

$(XLMR_RERANKER): $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch bert -task rerank -shape tiny -vocab-gguf .cache/xlmr/ggml-vocab-nomic-bert-moe.gguf -out $@

$(ARCH_RERANKERS): $(MODELS_DIR)/%-reranker-tiny.gguf: $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch $* -task rerank -shape tiny -tokenizer .cache/minilm/tokenizer.json -out $@

$(XLMR_TINY): $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch bert -shape tiny -vocab-gguf .cache/xlmr/ggml-vocab-nomic-bert-moe.gguf -out $@

$(MINILM_F32): $(ENCODERS)
	$(GO) run ./cmd/genmodel -convert .cache/minilm -type f32 -name all-MiniLM-L6-v2 -out $@

$(MINILM_F16): $(ENCODERS)
	$(GO) run ./cmd/genmodel -convert .cache/minilm -type f16 -name all-MiniLM-L6-v2 -out $@

$(BERT_LARGE): $(ENCODERS)
	$(GO) run ./cmd/genmodel -arch bert -shape large -type f16 -tokenizer .cache/minilm/tokenizer.json -out $@

models: $(TINY_MODEL) $(TINY_RERANKER) $(ENCODER_MODELS)
bench-model: $(BENCH_MODEL)

# Ollama as a benchmark peer, built from the Go module cache with the cgo flags above
# (bench/peers/README.md). Its own module, so its dependencies stay out of go.mod.
OLLAMA_PEER_VERSION = $(shell cd bench/peers/ollama && $(GO) list -m -f '{{.Version}}' github.com/ollama/ollama)
bench-peers:
	cd bench/peers/ollama && $(GO) build -ldflags "-X github.com/ollama/ollama/version.Version=$(patsubst v%,%,$(OLLAMA_PEER_VERSION))" -o $(CURDIR)/bin/ollama .

# The benchmark of docs/performance.md: embed-stack against the engine floor and Ollama
# on the 0.6B-shaped model, about 35 minutes on 2 idle cores. BENCH_PLAN sizes it to
# that (`make bench BENCH_PLAN=` runs the harness's full defaults, over an hour: the
# 15000-token document alone takes 5 minutes per contender);
# BENCH_FLAGS adds flags (`bin/embed-stack bench --help`). The report lands in
# .cache/bench/.
BENCH_PLAN  ?= --long-tokens 9000 --skip grid/8x2048 --reps 2
BENCH_FLAGS ?=
bench: build bench-model bench-peers
	@mkdir -p .cache/bench
	bin/embed-stack bench --model $(BENCH_MODEL) --ollama bin/ollama \
		--json .cache/bench/report.json --markdown .cache/bench/table.md $(BENCH_PLAN) $(BENCH_FLAGS)

# sentence-transformers on torch's CPU backend, the bench's peer for the real MiniLM
# checkpoint (bench/peers/sentence_transformers/server.py): every package pinned,
# installed without their own dependencies. torch from PyPI brings its CUDA libraries
# (about 5 GB), so only the bench targets install it, never make test.
ST_VENV  ?= .cache/venv-st
ST_REQS  := bench/peers/sentence_transformers/requirements.txt
$(ST_VENV)/installed: $(ST_REQS)
	rm -rf $(ST_VENV)
	python3 -m venv $(ST_VENV)
	$(ST_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r $(ST_REQS)
	touch $@
bench-st: $(ST_VENV)/installed

# The MiniLM benchmark of docs/performance.md: the real all-MiniLM-L6-v2 (F32 GGUF)
# through the floor, embed-stack and Ollama, and its original checkpoint through
# sentence-transformers on torch CPU, on a short query, 32 x 128 and 16 concurrent
# clients, interleaved; a few minutes on 2 idle cores. MINILM_BENCH_MODEL=$(MINILM_F16)
# runs the F16 file. The report lands in .cache/bench/minilm.*.
MINILM_BENCH_MODEL ?= $(MINILM_F32)
MINILM_PLAN ?= --only seed/short,grid/32x128,clients/16 --long-tokens 512 --heavy-tokens 8192 --reps 3
bench-minilm: build $(MINILM_BENCH_MODEL) bench-peers bench-st
	@mkdir -p .cache/bench
	bin/embed-stack bench --model $(MINILM_BENCH_MODEL) --ollama bin/ollama --sentence-transformers .cache/minilm \
		--st-python $(ST_VENV)/bin/python --json .cache/bench/minilm.json --markdown .cache/bench/minilm.md $(MINILM_PLAN) $(BENCH_FLAGS)

# The encoder benchmark of docs/performance.md: a BERT-large-shaped model (335M
# parameters, the F16 file, BF16 at load where the kernels multiply it) through the
# floor, embed-stack and Ollama on a short query and batches of 128 and 256 tokens;
# a few minutes on 2 idle cores. The report lands in .cache/bench/bert-large.*.
ENCODER_PLAN ?= --only grid/1x16,grid/8x128,grid/32x128,grid/8x256 --batches 1,8,32 --lengths 16,128,256 --reps 3
bench-encoder: build $(BERT_LARGE) bench-peers
	@mkdir -p .cache/bench
	bin/embed-stack bench --model $(BERT_LARGE) --ollama bin/ollama \
		--json .cache/bench/bert-large.json --markdown .cache/bench/bert-large.md $(ENCODER_PLAN) $(BENCH_FLAGS)

# The generated models are prerequisites (built when missing); any other MODEL is a
# file or a Hub reference that serve resolves itself.
run: build $(filter $(TINY_MODEL) $(TINY_RERANKER) $(BENCH_MODEL),$(MODEL))
	bin/embed-stack serve --model $(MODEL) --addr $(ADDR)

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

# Everything: the pure-Go packages must also build with CGO_ENABLED=0; their unit
# tests run with the race detector. The end-to-end packages (which drive the real
# binary and the tiny model) and the cgo engine run without it: -race would rebuild
# all of llama.cpp a second time and slow the float64 reference tenfold, for no
# Go-level concurrency the unit tests do not already cover.
# EMBED_STACK_REQUIRE_E2E=1 turns "model or binary missing" from a skip into a
# failure. Then the node clients (openai, @langchain/openai) and the Python ones
# (openai, langchain-openai, llama-index, litellm) against the binary, and
# the Cohere SDK against a reranker, and the clients of Ollama's and TEI's APIs.
test: build models vet test-pure test-tokenizers fuzz test-go test-node test-openapi test-python test-cohere test-integrations test-dist

E2E_PKGS     = $(shell $(GO) list -find ./... | grep -e /backends/llama -e /cmd/embed-stack -e /conformance -e /deploy/haproxy)
UNIT_PKGS    = $(filter-out $(E2E_PKGS),$(PURE_PKGS))

# The fast inner loop (docs/testing.md): the unit tests of the pure-Go packages, with cgo
# off and -short, which skips every test that runs the binary (internal/e2e) or compiles
# llama.cpp. Nothing is built, downloaded or generated first, so it works on a fresh
# clone offline; tests whose data is missing (models/, .cache/qwen3) skip as in a plain
# go test. go test caches the results of the packages that did not change.
# UNIT_FLAGS adds flags: `make unit UNIT_FLAGS='-run Batch -v'`, or -count=1 to rerun.
UNIT_FLAGS  ?=
unit:
	CGO_ENABLED=0 $(GO) test -short $(UNIT_FLAGS) $(UNIT_PKGS)

test-pure:
	CGO_ENABLED=0 $(GO) build $(PURE_PKGS)

# pyarrow, which reads the batch job's Parquet output in cmd/embed-stack's tests, in a
# virtual environment of the pinned packages of batch/testdata/requirements.txt,
# created on first use and again when that file changes; nothing is installed
# outside it.
PYARROW_VENV ?= .cache/venv-pyarrow
PYARROW_REQS := batch/testdata/requirements.txt
INTEG_VENV   ?= .cache/venv-integrations
INTEG_REQS   := conformance/integrations/requirements.txt

$(PYARROW_VENV)/installed: $(PYARROW_REQS)
	rm -rf $(PYARROW_VENV)
	python3 -m venv $(PYARROW_VENV)
	$(PYARROW_VENV)/bin/pip install -q --disable-pip-version-check -r $(PYARROW_REQS)
	touch $@

# The batch job's chroma:// output is tested against `chroma run` from the
# integrations suite's virtual environment (its pinned chromadb), which also reads
# the collections back: test-go creates it when test-integrations has not yet.
test-go: build models cpu-variant-test $(ENCODERS) $(PYARROW_VENV)/installed $(INTEG_VENV)/installed
	EMBED_STACK_REQUIRE_E2E=1 $(GO) test -race -count=1 -timeout 20m $(UNIT_PKGS)
	EMBED_STACK_REQUIRE_E2E=1 EMBED_STACK_PYTHON=$(CURDIR)/$(PYARROW_VENV)/bin/python EMBED_STACK_CHROMA_VENV=$(CURDIR)/$(INTEG_VENV) \
		$(GO) test -count=1 -timeout 40m $(E2E_PKGS)

# Three replicas behind HAProxy under a minute of load, with a graceful restart and a
# crash (deploy/haproxy/README.md); part of test-go, here alone and verbose, with the
# totals it measured. Needs haproxy (`make deps`).
test-scale: build models
	EMBED_STACK_REQUIRE_E2E=1 $(GO) test -count=1 -v -timeout 10m ./deploy/haproxy/

# The embedding cache's soak (docs/performance.md, "The cache's memory"): distinct
# inputs for CACHE_SOAK through serve --cache-size CACHE_SOAK_MIB, the server's
# RSS, live heap and the cache's bytes sampled throughout, and the same assertions
# as the short run in test-go (no growth once the cache is full). Verbose, with
# the samples.
CACHE_SOAK     ?= 10m
CACHE_SOAK_MIB ?= 2
soak-cache: build models
	EMBED_STACK_REQUIRE_E2E=1 EMBED_STACK_CACHE_SOAK=$(CACHE_SOAK) EMBED_STACK_CACHE_SOAK_MIB=$(CACHE_SOAK_MIB) \
		$(GO) test -count=1 -v -timeout 3h -run '^TestCacheBoundedDistinct$$' ./conformance/

# The fuzzers of the request decoder and of wrapping + tokenization, each for
# FUZZTIME (their committed seed corpora also run as plain tests in test-go). A
# failing input is written to the package's testdata/fuzz; commit it with the fix.
FUZZTIME ?= 20s
FUZZERS  = openai:FuzzDecodeEmbeddingRequest routing:FuzzPrepareText routing:FuzzPrepareTokenIDs routing:FuzzTruncate

fuzz: models
	@set -e; for f in $(FUZZERS); do \
		pkg=$${f%%:*}; name=$${f##*:}; \
		echo "fuzz ./$$pkg $$name for $(FUZZTIME)"; \
		EMBED_STACK_REQUIRE_E2E=1 CGO_ENABLED=0 $(GO) test ./$$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME); \
	done

# Known vulnerabilities reachable from the code. Needs the vulnerability database:
# online by default, or VULNDB=file:///dir built offline (docs/reliability.md).
VULNDB ?=
vulncheck:
	$(GO) run golang.org/x/vuln/cmd/govulncheck@v1.9.0 $(if $(VULNDB),-db $(VULNDB)) ./...

test-node: build models
	cd conformance/node && npm ci --no-audit --no-fund --loglevel=error && node --test
	cd docs/clients && npm ci --no-audit --no-fund --loglevel=error && node --test

# The Python client suite (conformance/python, pytest) in a virtual environment of
# the pinned packages of its requirements.txt, created on first use and again when
# that file changes; nothing is installed outside it (--no-compile: Python compiles
# only the modules a test imports, when it imports them, instead of all of litellm's
# and llama-index's at install). tiktoken's cl100k_base file, which LangChain needs
# and tiktoken would download, is written from the vocabulary the server itself
# decodes token ids with (`embed-stack tiktoken-cache`, docs/clients.md).
VENV         ?= .cache/venv
PY_REQS      := conformance/python/requirements.txt
TIKTOKEN_DIR := .cache/tiktoken

$(VENV)/installed: $(PY_REQS)
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-compile -r $(PY_REQS)
	touch $@

test-python: build models $(VENV)/installed
	bin/embed-stack tiktoken-cache $(TIKTOKEN_DIR) >/dev/null
	cd conformance/python && TIKTOKEN_CACHE_DIR=$(CURDIR)/$(TIKTOKEN_DIR) EMBED_STACK_REQUIRE_E2E=1 \
		$(CURDIR)/$(VENV)/bin/python -m pytest
	cd bench/peers/sentence_transformers && $(CURDIR)/$(VENV)/bin/python -m unittest test_server

# The OpenAPI fuzzer (conformance/openapi_fuzz_test.go): schemathesis, pinned in
# conformance/python/requirements.txt and installed with the Python clients into
# $(VENV) (above), against the real binary: 75 s on one model, then 2 x 60 s on
# a reranker beside an embedding model.
test-openapi: build models $(VENV)/installed
	EMBED_STACK_REQUIRE_E2E=1 EMBED_STACK_SCHEMATHESIS=$(CURDIR)/$(VENV)/bin/schemathesis \
		$(GO) test -count=1 -timeout 15m -run '^TestOpenAPIFuzz$$' -v ./conformance/

# A real rerank client (conformance/cohere_test.go): the Cohere Python SDK, pinned with
# everything it pulls in by conformance/cohere/requirements.txt, in its own virtual
# environment, against the real binary and the tiny reranker.
COHERE_VENV ?= .cache/venv-cohere
COHERE_REQS := conformance/cohere/requirements.txt

$(COHERE_VENV)/installed: $(COHERE_REQS)
	rm -rf $(COHERE_VENV)
	python3 -m venv $(COHERE_VENV)
	$(COHERE_VENV)/bin/pip install -q --disable-pip-version-check -r $(COHERE_REQS)
	touch $@

test-cohere: build models $(COHERE_VENV)/installed
	EMBED_STACK_REQUIRE_E2E=1 EMBED_STACK_COHERE_PYTHON=$(CURDIR)/$(COHERE_VENV)/bin/python \
		$(GO) test -count=1 -timeout 5m -run '^TestCohereClient$$' -v ./conformance/

# The integration clients' suite (conformance/integrations, pytest): Ollama's clients
# (ollama, langchain-ollama, llama-index-embeddings-ollama, Chroma's embedding
# functions) and TEI's (huggingface_hub, Haystack), with the Python blocks of
# docs/clients.md that use them, against the real binary. Its own virtual environment
# of the pinned packages of its requirements.txt, created on first use and again when
# that file changes: chromadb's dependencies conflict with $(VENV)'s. (INTEG_VENV and
# INTEG_REQS are set above test-go, which needs it too.)

$(INTEG_VENV)/installed: $(INTEG_REQS)
	rm -rf $(INTEG_VENV)
	python3 -m venv $(INTEG_VENV)
	$(INTEG_VENV)/bin/pip install -q --disable-pip-version-check --no-compile -r $(INTEG_REQS)
	touch $@

test-integrations: build models $(INTEG_VENV)/installed
	cd conformance/integrations && EMBED_STACK_REQUIRE_E2E=1 $(CURDIR)/$(INTEG_VENV)/bin/python -m pytest

# The worker-protocol suite (conformance/worker, documented in its doc.go) alone,
# against the Go llama.cpp worker on the tiny model. `make test` runs it as well, as
# part of ./... .
conformance-worker: build models
	EMBED_STACK_REQUIRE_E2E=1 $(GO) test -race -count=1 -v ./conformance/worker/

# On an Apple Silicon Mac only (CI never runs it): the same suite against the Swift/MLX
# worker, compared with the llama.cpp worker on the F16 GGUF of the same checkpoint,
# then mlx-embed-server/scripts/crosscheck.py. mlx-embed-server/README.md says how to
# build the server and get both models.
MLX_SERVER     ?= mlx-embed-server/.xcodebuild/Build/Products/Release/mlx-embed-server
MLX_MODEL      ?= $(MODELS_DIR)/Qwen3-Embedding-0.6B
MLX_GGUF       ?= $(MODELS_DIR)/Qwen3-Embedding-0.6B-f16.gguf
# MLX rounds every matmul output to F16 and llama.cpp keeps F32: the bound for F16.
MLX_COSINE_MIN ?= 0.999

conformance-mlx: build
	@test -x "$(MLX_SERVER)" || { echo "no executable $(MLX_SERVER): build it with 'make -C mlx-embed-server' (see mlx-embed-server/README.md) or set MLX_SERVER=path"; exit 1; }
	@test -f "$(MLX_MODEL)/config.json" || { echo "no $(MLX_MODEL)/config.json: download the Hugging Face snapshot (mlx-embed-server/README.md) or set MLX_MODEL=dir"; exit 1; }
	@test -f "$(MLX_GGUF)" || { echo "no $(MLX_GGUF): convert the same snapshot to an F16 GGUF (mlx-embed-server/README.md) or set MLX_GGUF=path"; exit 1; }
	WORKER_CMD="$(MLX_SERVER) --model $(MLX_MODEL)" \
	WORKER_CMD_B="bin/embed-stack worker --model $(MLX_GGUF)" \
	WORKER_COSINE_MIN=$(MLX_COSINE_MIN) WORKER_READY_TIMEOUT=10m \
		$(GO) test -count=1 -v -timeout 60m ./conformance/worker/
	python3 mlx-embed-server/scripts/crosscheck.py --min-cosine $(MLX_COSINE_MIN) \
		--mlx-cmd "$(MLX_SERVER) --model $(MLX_MODEL)" \
		--llama-cmd "bin/embed-stack worker --model $(MLX_GGUF)"

# ggml's CUDA backend, built with CMake (and nvcc) from the pinned module's sources
# into $(BACKEND_DIR), where bin/embed-stack loads it (docs/building.md):
# libggml-cuda.so and the libggml-base.so it links against. CUDA_ARCHITECTURES is
# CMake's list, e.g. 90 for an H100/H200, "80;86;89;90" for several; native builds
# for the GPUs of this machine.
CUDA_ARCHITECTURES ?= native
CUDA_BUILD_DIR     ?= .cache/cuda-build
BACKEND_DIR        ?= lib/embed-stack
CUDA_JOBS          ?= $(shell nproc 2>/dev/null || echo 2)

cuda:
	@command -v cmake >/dev/null || { echo "make cuda needs cmake (apt-get install cmake)"; exit 1; }
	cmake -S cmake/cuda -B $(CUDA_BUILD_DIR) -DOLLAMA_DIR=$(OLLAMA_DIR) \
		-DEMBED_STACK_BACKEND_DIR=$(abspath $(BACKEND_DIR)) \
		-DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHITECTURES)" $(CUDA_CMAKE_FLAGS)
	cmake --build $(CUDA_BUILD_DIR) --target ggml-cuda -j $(CUDA_JOBS)
	@ls -l $(BACKEND_DIR)

# Release archives, for installing without a toolchain: dist/embed-stack-VERSION-linux-ARCH.tar.gz
# and dist/SHA256SUMS (scripts/dist.sh says what an archive holds). linux/amd64, plus
# linux/arm64 where Debian's cross compiler is installed (apt-get install
# g++-aarch64-linux-gnu); DIST_PLATFORMS picks others. A cold llama.cpp build per
# platform takes about five minutes on 2 cores, and its CPU kernel variants (every one
# of the architecture; DIST_CPU_VARIANTS="haswell zen4" some, "none" none) about 1.5
# CPU-minutes each. make test's archive carries only the variant it tests.
DIST_PLATFORMS ?= linux/$(GOARCH_T) $(if $(and $(filter amd64,$(GOARCH_T)),$(shell command -v aarch64-linux-gnu-g++)),linux/arm64)

dist:
	GO=$(GO) STANDIN_INCLUDE=$(STANDIN_INCLUDE) bash scripts/dist.sh $(VERSION) $(COMMIT) $(DIST_PLATFORMS)

# The archive of this host's platform, unpacked and serving the tiny model
# (deploy/dist_test.go); part of make test.
test-dist: build models
	$(MAKE) dist DIST_PLATFORMS=linux/$(GOARCH_T) DIST_CPU_VARIANTS="$(or $(TEST_CPU_VARIANT),none)"
	EMBED_STACK_REQUIRE_E2E=1 EMBED_STACK_DIST=$(CURDIR)/dist/embed-stack-$(VERSION)-linux-$(GOARCH_T).tar.gz \
		$(GO) test -count=1 -run '^TestDistArchive$$' -v ./deploy/

# ggml's CPU kernels as variant libraries, built with CMake from the pinned module's
# sources into $(BACKEND_DIR), where workers load the best one for their CPU
# (docs/building.md, "CPU kernel variants"): libggml-cpu-NAME.so for each variant of
# cmake/cpu/variants.cmake (AVX, AVX2, AVX-VNNI, AVX-512, +VNNI, +VBMI, +BF16, AMX;
# arm64 dotprod, FP16, SVE/i8mm), and the libggml-base.so they link against.
# CPU_VARIANTS="haswell zen4" builds some only; CPU_CROSS=aarch64-linux-gnu builds
# the arm64 ones with that cross compiler (g++-aarch64-linux-gnu), in their own build
# folder (give them their own BACKEND_DIR too).
CPU_VARIANTS   ?=
CPU_CROSS      ?=
CPU_BUILD_DIR  ?= .cache/cpu-build$(if $(CPU_CROSS),-$(CPU_CROSS))
CPU_JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CPU_CMAKE_FLAGS ?=
# -mtune for every variant. Empty: each variant's own (cmake/cpu/variants.cmake:
# zen4 for AMD Zen, the others GCC's `generic`, since their CPUs are several), what
# release archives and the image get. The instruction sets stay each variant's, so the
# libraries still run on any CPU that has them; CPU_TUNE=native schedules the code for
# the build host, as the compiled-in -march=native kernels are (on the Zen 3
# development host, generic tuning costs the haswell variant up to about 10%), and
# CPU_TUNE=generic tunes none (docs/performance.md).
CPU_TUNE       ?=
CPU_CROSS_FLAGS = $(if $(CPU_CROSS),-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=$(firstword $(subst -, ,$(CPU_CROSS))) \
                  -DCMAKE_C_COMPILER=$(CPU_CROSS)-gcc -DCMAKE_CXX_COMPILER=$(CPU_CROSS)-g++)

# A build for any CPU of its architecture (the container image, release archives): the
# compiled-in kernels for a conservative baseline, PORTABLE_MARCH (x86-64-v2: SSE4.2
# and POPCNT, every x86-64 server CPU since about 2009; armv8-a on arm64), and every CPU
# kernel variant in $(BACKEND_DIR), of which each worker loads the best for its CPU
# (docs/building.md, "CPU kernel variants"). The binary records its baseline, and a
# worker of a portable build that finds no variant for its CPU says so in a warning.
PORTABLE_MARCH ?= $(if $(filter arm64,$(GOARCH_T)),armv8-a,x86-64-v2)
portable:
	$(MAKE) build MARCH=$(PORTABLE_MARCH)
	$(MAKE) cpu-variants

# The CPU kernel variant the end-to-end tests load (cmd/embed-stack,
# cpuvariant_e2e_test.go), built by `make test` into $(BACKEND_DIR) like any other: the
# best this CPU runs, as a worker's --cpu-variant auto picks it (tools/cpuvariant-best:
# haswell on an AVX2-only x86, zen4 on an AVX-512 BF16 one, sapphirerapids with AMX,
# the dotprod or i8mm one on arm64), so that each host tests the kernels its users
# get. The others are compiled (at -O0) by deploy's TestCPUVariantsCompile.
TEST_CPU_VARIANT ?= $(shell CGO_ENABLED=0 $(GO) run ./tools/cpuvariant-best 2>/dev/null)
# The rate of this core's BF16 dot product against its float32 FMAs, which decides
# the arithmetic of embed-stack's BF16 kernels (tools/bf16-rate/rate.c).
bf16-rate:
	@mkdir -p .cache
	$(CC) -O2 -o .cache/bf16-rate tools/bf16-rate/rate.c
	.cache/bf16-rate

cpu-variant-test:
	$(if $(TEST_CPU_VARIANT),$(MAKE) cpu-variants CPU_VARIANTS=$(TEST_CPU_VARIANT),@echo "this CPU runs no CPU kernel variant: none to build for the tests")

cpu-variants:
	@command -v cmake >/dev/null || { echo "make cpu-variants needs cmake (apt-get install cmake)"; exit 1; }
	cmake -S cmake/cpu -B $(CPU_BUILD_DIR) -DOLLAMA_DIR=$(OLLAMA_DIR) \
		-DEMBED_STACK_BACKEND_DIR=$(abspath $(BACKEND_DIR)) -DEMBED_STACK_CPU_TUNE=$(CPU_TUNE) $(CPU_CROSS_FLAGS) $(CPU_CMAKE_FLAGS)
	cmake --build $(CPU_BUILD_DIR) -j $(CPU_JOBS) --target $(or $(addprefix ggml-cpu-,$(CPU_VARIANTS)),cpu-variants)
	@ls -l $(BACKEND_DIR)

clean:
	rm -rf bin dist

# `eval "$(make -s cgo-env)"` gives a shell the same cgo flags (and so the same build
# cache entries) as the Makefile.
cgo-env:
	@echo 'export CGO_ENABLED=1'
	@echo "export CGO_CPPFLAGS='$(CGO_CPPFLAGS)'"
	@echo "export CGO_CFLAGS='$(CGO_CFLAGS)'"
	@echo "export CGO_CXXFLAGS='$(CGO_CXXFLAGS)'"
