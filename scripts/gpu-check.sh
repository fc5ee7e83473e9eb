#!/usr/bin/env bash
# The GPU check of issue 14 (docs/performance.md, "GPU"): build ggml's CUDA backend,
# then measure embed-stack on an NVIDIA GPU against the float64 reference and the
# PyTorch peer. Two halves:
#
#   scripts/gpu-check.sh prepare      here, with Go: writes .cache/gpu-check/ (about
#                                     45 MiB): stripped binaries, the ggml sources of
#                                     the pinned module, the tokenizer (gzipped);
#                                     GPU_CHECK_OLLAMA=1: the CPU phase's pack, with
#                                     Ollama and without the GPU phases' parts
#   scripts/gpu-check.sh build        there: libggml-cuda.so for CUDA_ARCHITECTURES (90)
#   scripts/gpu-check.sh check        there: reference agreement, tokens/s, the PyTorch
#                                     peer, conformance on the GPU, and the machine's CPU
#                                     for issue 23 (GPU_CHECK_PHASES picks and orders
#                                     them); $OUT/gpu-check.tar.gz
#
# The machine "there" has nvcc, CMake, PyTorch and transformers but no Go and no
# network; every phase is bounded (timeout) to fit a 10-minute command, and writes
# what it measured to $OUT as it goes, so a phase cut short still returns its tables.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=${GPU_CHECK_DIR:-$ROOT/.cache/gpu-check}
OUT=${OUT:-$PACK/out} # gpu-check.tar.gz: every table and log, packed after each phase
RES=$PACK/results
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
	if [ -n "${GPU_CHECK_OLLAMA:-}" ]; then
		# The CPU phase's pack: Ollama (stripped; its module as `make bench-peers` builds
		# it) for the served comparison, in the room of the conformance suite and the
		# ggml sources, which only the GPU phases use (the carry holds 64 MiB).
		local v
		v=$(cd bench/peers/ollama && go list -m -f '{{.Version}}' github.com/ollama/ollama)
		(cd bench/peers/ollama && go build -ldflags "-s -w -X github.com/ollama/ollama/version.Version=${v#v}" -o "$BIN/ollama" .)
	else
		CGO_ENABLED=0 go test -c -ldflags "-s -w" -o "$BIN/conformance.test" ./conformance
	fi
	# The ggml tree of the module (sources, headers, CMake files), where cmake/cuda
	# looks for it: OLLAMA_DIR/ml/backend/ggml/ggml.
	[ -z "${GPU_CHECK_OLLAMA:-}" ] || { cpu_variants; return; }
	mkdir -p "$PACK/src/ml/backend/ggml"
	cp -r "$ollama/ml/backend/ggml/ggml" "$PACK/src/ml/backend/ggml/"
	chmod -R u+w "$PACK/src"
	rm -rf "$PACK/src/ml/backend/ggml/ggml/src/"{ggml-vulkan,ggml-hip,ggml-metal,ggml-blas}
	find "$PACK/src" -name '*.go' -delete
	cpu_variants
}

# cpu_variants ends prepare: issue 23's CPU phase needs the kernel variants of the AMX
# and AVX-512 BF16 CPUs such machines have had, tuned for none, in a folder of their
# own (phase_cpu); then everything is packed.
cpu_variants() {
	make -s cpu-variants CPU_VARIANTS="sapphirerapids zen4" CPU_TUNE=generic \
		BACKEND_DIR="$PACK/cpu/lib/embed-stack" CPU_BUILD_DIR="$ROOT/.cache/cpu-build-gpu-check" >/dev/null
	gzip -9 "$BIN"/*
	gzip -9c .cache/qwen3/tokenizer.json > "$PACK/tokenizer.json.gz"
	local size
	size=$(du -sm "$PACK" | cut -f1)
	log "prepared $PACK: ${size} MiB (carry limit 64)"
	[ "$size" -lt 64 ] || { log "too large to carry"; exit 1; }
}

unpack() {
	for f in "$BIN"/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
	# the tokenizer travels packed too (11 MiB of JSON; the carry holds 64 MiB)
	if [ -f "$PACK/tokenizer.json.gz" ] && [ ! -f "$ROOT/.cache/qwen3/tokenizer.json" ]; then
		mkdir -p "$ROOT/.cache/qwen3" && gunzip -c "$PACK/tokenizer.json.gz" > "$ROOT/.cache/qwen3/tokenizer.json"
	fi
	chmod +x "$BIN"/*
	mkdir -p "$RES" "$OUT"
}

# save packs everything measured so far into $OUT/gpu-check.tar.gz (the device tool
# brings back at most 8 files), replacing the last archive, so that a command cut
# short at its limit still returns the phases it finished.
save() {
	tar -czf "$OUT/.gpu-check.tar.gz" -C "$RES" . && mv "$OUT/.gpu-check.tar.gz" "$OUT/gpu-check.tar.gz"
}

build() {
	unpack
	[ -x /usr/local/cuda/bin/nvcc ] && PATH=$PATH:/usr/local/cuda/bin
	command -v nvcc >/dev/null || { log "no nvcc"; exit 1; }
	export CUDACXX=${CUDACXX:-$(command -v nvcc)}
	{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvcc --version | tail -2
		grep -m1 'model name' /proc/cpuinfo; nproc; } | tee "$RES/gpu.txt"
	local start=$SECONDS
	local gen=Ninja
	command -v ninja >/dev/null || gen="Unix Makefiles"
	cmake -S "$ROOT/cmake/cuda" -B "$PACK/cuda-build" -G "$gen" -DOLLAMA_DIR="$PACK/src" \
		-DEMBED_STACK_BACKEND_DIR="$LIB" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" 2>&1 | tail -5
	timeout "${GPU_CHECK_BUILD_TIMEOUT:-540}" cmake --build "$PACK/cuda-build" --target ggml-cuda -j "$JOBS" 2>&1 | tail -5
	ls -l "$LIB" | tee "$RES/lib.txt"
	echo "libggml-cuda.so for sm_$ARCH: $((SECONDS - start)) s with $JOBS jobs" | tee "$RES/build.txt"
	"$BIN/embed-stack" devices | tee "$RES/devices.txt"
	save
}

TINY=$ROOT/models/tiny.gguf
BIG=$PACK/models/qwen3-0.6b-f16.gguf
HF=$PACK/models/qwen3-0.6b-hf

models() {
	mkdir -p "$PACK/models" "$ROOT/models"
	[ -f "$TINY" ] || "$BIN/genmodel" -tokenizer "$ROOT/.cache/qwen3/tokenizer.json" -shape tiny -out "$TINY"
	if [ "${1:-}" = big ] && { [ ! -f "$BIG" ] || { [ "${2:-}" = hf ] && [ ! -d "$HF" ]; }; }; then
		local start=$SECONDS hf=()
		[ "${2:-}" = hf ] && hf=(-hf "$HF")
		"$BIN/genmodel" -tokenizer "$ROOT/.cache/qwen3/tokenizer.json" -shape 0.6b -out "$BIG" "${hf[@]}"
		log "0.6B model and its HF snapshot written in $((SECONDS - start)) s"
	fi
}

# Agreement with the float64 reference (tiny model) at 16, 512, 8192 and 32768
# tokens (GPU_CHECK_PRECISION_LENGTHS; the 32768-token reference alone takes minutes
# of CPU): the engine's own choice and each kernel, on the GPU.
phase_precision() {
	models
	(cd "$ROOT/backends/llama" && EMBED_STACK_MEASURE_PRECISION=${GPU_CHECK_PRECISION_LENGTHS:-16,512,8192,32768} EMBED_STACK_MEASURE_ATTN=plain,flash,flash-bf16v \
		timeout "$(bounded "${GPU_CHECK_PRECISION_TIMEOUT:-300}")" "$BIN/llama.test" -test.run '^TestMeasurePrecision$' -test.v -test.timeout=590s 2>&1 |
		grep -E 'cosine|FAIL|ok|panic|device|error') | tee "$RES/precision.txt" || true
}

# tokens/s on the 0.6B shape: embed-stack (engine floor and server). --long-tokens sizes
# the floor's context for the 32768-token input (the default held 15040 on the H200).
phase_bench() {
	models big
	(cd "$ROOT" && timeout "$(bounded "${GPU_CHECK_BENCH_TIMEOUT:-240}")" "$BIN/embed-stack" bench --model "$BIG" \
		--only grid/32x512,grid/1x8192,grid/1x32768,seed/short,clients/16 --batches 1,32 --lengths 512,8192,32768 \
		--max-grid-tokens 0 --clients 16 --client-duration 5s --reps 3 --short-tokens 32 --long-tokens 32768 \
		--json "$RES/bench.json" --markdown "$RES/bench.md" 2>&1 | tail -40) | tee "$RES/bench.txt" || true
}

# The PyTorch peer on the same weights (bf16 for speed, f32 as a second reference
# for embed-stack's vectors), against a server on the GPU.
phase_peer() {
	models big hf
	local addr=127.0.0.1:18080
	"$BIN/embed-stack" serve --model "$BIG" --addr "$addr" --token-ids native --warm-max-tokens 8192 > "$RES/serve.log" 2>&1 &
	local pid=$!
	for _ in $(seq 120); do curl -sf "http://$addr/ready" >/dev/null && break; sleep 1; done
	timeout "$(bounded "${GPU_CHECK_PEER_TIMEOUT:-240}")" python3 "$ROOT/scripts/gpu_peer.py" --hf "$HF" --url "http://$addr/v1" --out "$RES" > "$RES/peer.txt" 2>&1 || true
	tail -30 "$RES/peer.txt"
	curl -s "http://$addr/health" > "$RES/health.json" || true
	curl -s "http://$addr/metrics" | grep embed_stack_device > "$RES/device-metrics.txt" || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# Issue 23 on the GPU machine's CPU (an Intel Xeon with AMX where one was seen),
# with no GPU backend in reach (the copy in $PACK/cpu, whose ../lib/embed-stack holds
# the CPU variants only). Steps (GPU_CHECK_CPU_STEPS picks and orders them):
#   test     the BF16 products in every arithmetic the CPU has, AMX tiles included,
#            against the exact product and ggml's own kernels
#   ceiling  PyTorch's matrix products (oneDNN) on every core and on two
#   f16      the engine floor on the F16 file converted to BF16 panels (--weights
#            bf16, what auto does on these CPUs), with AMX tiles and without
#            (EMBED_STACK_AMX=off), on every core
#   ollama   Ollama (bin/ollama, carried in $BIN) served beside embed-stack
#            (--weights bf16) on the issue's shapes, on every core
#   f16-2    the floor of f16 on two cores (the dev hosts' size)
#   q8       the floor on a Q8_0 file with AMX tiles and without
phase_cpu() {
	models big
	local q8=$PACK/models/qwen3-0.6b-q8_0.gguf cpu=$PACK/cpu n step
	n=$(nproc)
	mkdir -p "$cpu/bin" && cp "$BIN/embed-stack" "$cpu/bin/"
	"$cpu/bin/embed-stack" devices | tee "$RES/cpu-devices.txt"
	EMBED_STACK_AMX=off "$cpu/bin/embed-stack" devices | grep -i 'kernels' | tee -a "$RES/cpu-devices.txt" || true
	{ grep -m1 'model name' /proc/cpuinfo; grep -m1 flags /proc/cpuinfo; uname -r; } > "$RES/cpu-flags.txt"
	local shapes=grid/8x128,grid/32x128,grid/8x512
	for step in ${GPU_CHECK_CPU_STEPS:-test ceiling f16 ollama f16-2 q8}; do
		case $step in
		test)
			(cd "$ROOT/backends/llama" && timeout "$(bounded 150)" "$BIN/llama.test" -test.run '^(TestAccelBF16MulMat|TestAccelBF16Model)$' -test.v -test.timeout=150s 2>&1 |
				grep -vE '^=== (RUN|PAUSE|CONT)' | tail -30) | tee "$RES/cpu-test.txt" || true ;;
		ceiling) cpu_ceiling "$n" ;;
		f16)
			cpu_floor "f16-amx-$n" "$n" "$BIG" on "grid/1x16,$shapes"
			cpu_floor "f16-noamx-$n" "$n" "$BIG" off "grid/1x16,$shapes" ;;
		ollama)
			[ -x "$BIN/ollama" ] || continue
			(cd "$ROOT" && timeout "$(bounded "${GPU_CHECK_OLLAMA_TIMEOUT:-200}")" "$cpu/bin/embed-stack" bench --model "$BIG" --ollama "$BIN/ollama" \
				--threads "$n" --weights bf16 --weights-cache "$PACK/weights" --only grid/32x128,grid/8x512 --batches 8,32 --lengths 128,512 --reps 3 \
				--json "$RES/cpu-ollama.json" --markdown "$RES/cpu-ollama.md" 2>&1 | tail -30) | tee "$RES/cpu-ollama.txt" || true ;;
		f16-2)
			cpu_floor f16-amx-2 2 "$BIG" on grid/8x128
			cpu_floor f16-noamx-2 2 "$BIG" off grid/8x128 ;;
		q8)
			[ -f "$q8" ] || "$BIN/genmodel" -tokenizer "$ROOT/.cache/qwen3/tokenizer.json" -shape 0.6b -type q8_0 -out "$q8"
			cpu_floor "q8-amx-$n" "$n" "$q8" on "grid/1x16,$shapes" file
			cpu_floor "q8-noamx-$n" "$n" "$q8" off "grid/1x16,$shapes" file ;;
		esac
		save
	done
}

# cpu_ceiling THREADS: PyTorch's f32 and BF16 products of 512x1024x3072 on THREADS
# and on two threads.
cpu_ceiling() {
	timeout "$(bounded 60)" python3 - "$1" <<'PY' 2>&1 | tee "$RES/cpu-ceiling.txt" || true
import sys, time, torch
for threads in (int(sys.argv[1]), 2):
    torch.set_num_threads(threads)
    for dt in (torch.float32, torch.bfloat16):
        a, b = torch.randn(512, 1024, dtype=dt), torch.randn(1024, 3072, dtype=dt)
        for _ in range(5):
            a @ b
        reps, t = 50, time.perf_counter()
        for _ in range(reps):
            a @ b
        s = (time.perf_counter() - t) / reps
        print(f"torch {torch.__version__} {dt} 512x1024x3072 on {threads} threads: {2 * 512 * 1024 * 3072 / s / 1e9:.0f} GFLOP/s")
PY
}

# cpu_floor NAME THREADS MODEL AMX SHAPES [WEIGHTS]: the engine floor (bench
# --serve=false) with EMBED_STACK_AMX=AMX and --weights WEIGHTS (bf16 by default).
cpu_floor() {
	local name=$1 threads=$2 model=$3 amx=$4 only=$5 weights=${6:-bf16}
	(cd "$ROOT" && EMBED_STACK_AMX=$amx timeout "$(bounded "${GPU_CHECK_CPU_TIMEOUT:-100}")" "$cpu/bin/embed-stack" bench --serve=false --model "$model" \
		--threads "$threads" --weights "$weights" --weights-cache "$PACK/weights" --only "$only" --batches 1,8,32 --lengths 16,128,512 --warmup 1 --reps 3 \
		--markdown "$RES/cpu-$name.md" 2>&1 | grep -E '^bench:|floor' | sed "s/^/$name: /") | tee -a "$RES/cpu.txt" || true
	save
}

# The conformance suite (conformance/), its server on the GPU (auto picks it).
phase_conformance() {
	models
	(cd "$ROOT/conformance" && EMBED_STACK_BIN="$BIN/embed-stack" EMBED_STACK_MODEL="$TINY" EMBED_STACK_REQUIRE_E2E=1 \
		timeout "$(bounded "${GPU_CHECK_CONFORMANCE_TIMEOUT:-300}")" "$BIN/conformance.test" -test.count=1 -test.v -test.timeout=590s -test.skip '^TestDocsPageInBrowser$' > "$RES/conformance.txt" 2>&1) || true
	grep -E '^(--- FAIL|FAIL|ok|PASS)' "$RES/conformance.txt" | tail -40
	grep -c '^--- PASS' "$RES/conformance.txt" || true
}

# bounded is the timeout of a phase: its own, cut to end 10 s before
# GPU_CHECK_UNTIL (a time in seconds since the epoch), so that the phase's results
# are packed before the command that runs check reaches its limit.
bounded() {
	local left=$((${GPU_CHECK_UNTIL:-0} - $(date +%s) - 10))
	if [ "${GPU_CHECK_UNTIL:-0}" -gt 0 ] && [ "$left" -lt "$1" ]; then
		echo $((left > 1 ? left : 1))
	else
		echo "$1"
	fi
}

# check runs the phases named in GPU_CHECK_PHASES (all five by default), in that
# order: a lent machine's minutes are few, so the caller puts first what it needs most.
check() {
	unpack
	"$BIN/embed-stack" devices --json | tee "$RES/device.json"
	grep -q '"gpu":true' "$RES/device.json" || { log "the worker does not see a GPU: run the build phase first"; save; exit 1; }
	local phase start
	for phase in ${GPU_CHECK_PHASES:-precision bench peer conformance cpu}; do
		if [ "$(bounded 30)" -lt 30 ]; then
			log "$phase: skipped, GPU_CHECK_UNTIL is near"
			continue
		fi
		start=$SECONDS
		log "$phase"
		"phase_$phase"
		log "$phase: $((SECONDS - start)) s"
		save
	done
}

case "${1:-}" in
prepare) prepare ;;
build) build ;;
check) check ;;
phase) # the named phases alone, without check's GPU test: a phase's smoke test anywhere
	shift
	unpack
	for p in "$@"; do "phase_$p"; save; done ;;
*) echo "usage: $0 prepare|build|check|phase NAME... (see the comment at the top)" >&2; exit 2 ;;
esac
