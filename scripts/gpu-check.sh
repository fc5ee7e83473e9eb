#!/usr/bin/env bash
# The GPU check of issue 14 (docs/performance.md, "GPU"): build ggml's CUDA backend,
# then measure embed-stack on an NVIDIA GPU against the float64 reference and the
# PyTorch peer. Two halves:
#
#   scripts/gpu-check.sh prepare      here, with Go: writes .cache/gpu-check/ (about
#                                     30 MiB): stripped binaries, the ggml sources of
#                                     the pinned module, the tokenizer
#   scripts/gpu-check.sh build        there: libggml-cuda.so for CUDA_ARCHITECTURES (90)
#   scripts/gpu-check.sh check        there: conformance on the GPU, reference agreement,
#                                     tokens/s, the PyTorch peer; tables into $OUT
#
# The machine "there" has nvcc, CMake, PyTorch and transformers but no Go and no
# network; every phase is bounded (timeout) to fit a 10-minute command, and writes
# what it measured to $OUT as it goes, so a phase cut short still returns its tables.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=${GPU_CHECK_DIR:-$ROOT/.cache/gpu-check}
OUT=${OUT:-$PACK/out}
ARCH=${CUDA_ARCHITECTURES:-90}
JOBS=${JOBS:-$(nproc)}
BIN=$PACK/bin
LIB=$PACK/lib/embed-stack # ../lib/embed-stack from the binaries: their default backend folder

log() { echo "gpu-check: $*" >&2; }

prepare() {
	cd "$ROOT"
	export STANDIN_INCLUDE=${STANDIN_INCLUDE:-$ROOT/backends/llama/include}
	# The same flags as make build (no -trimpath): llama.cpp comes from the build cache
	# instead of being compiled again.
	eval "$(make -s cgo-env)"
	local ollama
	ollama=$(go list -m -f '{{.Dir}}' github.com/ollama/ollama)
	rm -rf "$PACK" && mkdir -p "$BIN" "$PACK/src"
	make -s tokenizer
	local ld="-s -w -X github.com/embed-stack/embed-stack/internal/buildinfo.Version=$(git describe --tags --always --dirty)"
	go build -ldflags "$ld" -o "$BIN/embed-stack" ./cmd/embed-stack
	CGO_ENABLED=0 go build -ldflags "-s -w" -o "$BIN/genmodel" ./cmd/genmodel
	go test -c -ldflags "-s -w" -o "$BIN/llama.test" ./backends/llama
	CGO_ENABLED=0 go test -c -ldflags "-s -w" -o "$BIN/conformance.test" ./conformance
	# The ggml tree of the module (sources, headers, CMake files), where cmake/cuda
	# looks for it: OLLAMA_DIR/ml/backend/ggml/ggml.
	mkdir -p "$PACK/src/ml/backend/ggml"
	cp -r "$ollama/ml/backend/ggml/ggml" "$PACK/src/ml/backend/ggml/"
	chmod -R u+w "$PACK/src"
	rm -rf "$PACK/src/ml/backend/ggml/ggml/src/"{ggml-vulkan,ggml-hip,ggml-metal,ggml-blas}
	find "$PACK/src" -name '*.go' -delete
	gzip -9 "$BIN"/*
	local size
	size=$(du -sm "$PACK" | cut -f1)
	log "prepared $PACK: ${size} MiB (carry limit 64)"
	[ "$size" -lt 64 ] || { log "too large to carry"; exit 1; }
}

unpack() {
	for f in "$BIN"/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
	chmod +x "$BIN"/*
	mkdir -p "$OUT"
}

build() {
	unpack
	command -v nvcc >/dev/null || { log "no nvcc"; exit 1; }
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.csv"
	local start=$SECONDS
	cmake -S "$ROOT/cmake/cuda" -B "$PACK/cuda-build" -G Ninja -DOLLAMA_DIR="$PACK/src" \
		-DEMBED_STACK_BACKEND_DIR="$LIB" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" 2>&1 | tail -5
	timeout 540 cmake --build "$PACK/cuda-build" --target ggml-cuda -j "$JOBS" 2>&1 | tail -5
	ls -l "$LIB" | tee "$OUT/lib.txt"
	echo "libggml-cuda.so for sm_$ARCH: $((SECONDS - start)) s with $JOBS jobs" | tee "$OUT/build.txt"
	"$BIN/embed-stack" devices | tee "$OUT/devices.txt"
}

check() {
	unpack
	"$BIN/embed-stack" devices --json | tee "$OUT/device.json"
	grep -q '"gpu":true' "$OUT/device.json" || { log "the worker does not see a GPU: run the build phase first"; exit 1; }
	mkdir -p "$PACK/models" "$ROOT/models"
	local tiny=$ROOT/models/tiny.gguf big=$PACK/models/qwen3-0.6b-f16.gguf hf=$PACK/models/qwen3-0.6b-hf
	[ -f "$tiny" ] || "$BIN/genmodel" -tokenizer "$ROOT/.cache/qwen3/tokenizer.json" -shape tiny -out "$tiny"
	[ -f "$big" ] || "$BIN/genmodel" -tokenizer "$ROOT/.cache/qwen3/tokenizer.json" -shape 0.6b -out "$big" -hf "$hf"

	# 1. The conformance suite, its server on the GPU (auto picks it).
	log "conformance on the GPU"
	(cd "$ROOT/conformance" && EMBED_STACK_BIN="$BIN/embed-stack" EMBED_STACK_MODEL="$tiny" EMBED_STACK_REQUIRE_E2E=1 \
		timeout 300 "$BIN/conformance.test" -test.count=1 -test.timeout=290s 2>&1 | tail -40) | tee "$OUT/conformance.txt" || true

	# 2. Agreement with the float64 reference (tiny model) at 16, 512, 8192 and 32768
	# tokens: the engine's own choice and each kernel, on the GPU.
	log "reference agreement"
	(cd "$ROOT/backends/llama" && EMBED_STACK_MEASURE_PRECISION=16,512,8192,32768 EMBED_STACK_MEASURE_ATTN=plain,flash,flash-bf16v \
		timeout 400 "$BIN/llama.test" -test.run '^TestMeasurePrecision$' -test.v -test.timeout=390s 2>&1 | grep -E 'cosine|FAIL|ok|panic' ) | tee "$OUT/precision.txt" || true

	# 3. tokens/s on the 0.6B shape: embed-stack (engine floor and server).
	log "throughput"
	(cd "$ROOT" && timeout 300 "$BIN/embed-stack" bench --model "$big" \
		--only grid/32x512,grid/1x8192,grid/1x32768,seed/short,clients/16 --batches 1,32 --lengths 512,8192,32768 \
		--max-grid-tokens 0 --clients 16 --client-duration 5s --reps 3 --short-tokens 16 \
		--json "$OUT/bench.json" --markdown "$OUT/bench.md" 2>&1 | tail -40) | tee "$OUT/bench.txt" || true

	# 4. The PyTorch peer on the same weights (bf16 for speed, f32 as a second
	# reference for embed-stack's vectors), against a server on the GPU.
	log "PyTorch peer"
	local addr=127.0.0.1:18080
	"$BIN/embed-stack" serve --model "$big" --addr "$addr" --token-ids native --warm-max-tokens 8192 > "$OUT/serve.log" 2>&1 &
	local pid=$!
	for _ in $(seq 120); do curl -sf "http://$addr/ready" >/dev/null && break; sleep 1; done
	timeout 300 python3 "$ROOT/scripts/gpu_peer.py" --hf "$hf" --url "http://$addr/v1" --out "$OUT" 2>&1 | tail -30 || true
	curl -s "http://$addr/health" > "$OUT/health.json" || true
	curl -s "http://$addr/metrics" | grep embed_stack_device > "$OUT/device-metrics.txt" || true
	kill "$pid"; wait "$pid" || true
}

case "${1:-}" in
prepare) prepare ;;
build) build ;;
check) check ;;
*) echo "usage: $0 prepare|build|check (see the comment at the top)" >&2; exit 2 ;;
esac
