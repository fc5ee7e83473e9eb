# Production image: embed-stack serve on 0.0.0.0:8080 as a non-root user.
#
#   docker build -t embed-stack --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg COMMIT="$(git rev-parse HEAD)" .
#   docker run --rm -p 8080:8080 -v hf-cache:/data/huggingface embed-stack
#
# The model (by default the official Qwen3-Embedding-0.6B F16 GGUF) is downloaded on
# first start into the Hugging Face cache under /data/huggingface: mount a volume there
# to keep it. Set EMBED_STACK_MODEL to another Hub reference or to a mounted .gguf.

# --- build: `make portable`, the steps of `make build` in CI plus the CPU variants ---
FROM golang:1.26-trixie AS build
RUN apt-get update \
	&& apt-get install -y --no-install-recommends g++ make cmake nlohmann-json3-dev libstb-dev \
	&& rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# One image, fastest on every CPU (`make portable`): the binary's own CPU kernels
# target a conservative baseline (x86-64-v2; armv8-a on arm64), and lib/embed-stack
# carries ggml's CPU kernels built for each CPU class (AVX2, AVX-512, AVX-512 with
# VNNI and BF16, AMX; arm64 dotprod, i8mm), of which each worker loads the best for
# the CPU it runs on (docs/building.md). PORTABLE_MARCH overrides the baseline.
ARG PORTABLE_MARCH=
# The context has no .git (.dockerignore): the version and commit come as build
# arguments (see the top); without them --version says dev.
ARG VERSION=dev
ARG COMMIT=
RUN make portable VERSION=${VERSION} COMMIT=${COMMIT} ${PORTABLE_MARCH:+PORTABLE_MARCH=${PORTABLE_MARCH}}

# --- run ------------------------------------------------------------------------------
FROM debian:trixie-slim
RUN apt-get update \
	&& apt-get install -y --no-install-recommends ca-certificates curl libstdc++6 \
	&& rm -rf /var/lib/apt/lists/* \
	&& groupadd --system --gid 10001 embed \
	&& useradd --system --uid 10001 --gid embed --home-dir /data --shell /usr/sbin/nologin embed \
	&& mkdir -p /data/huggingface \
	&& chown -R embed:embed /data
COPY --from=build /src/bin/embed-stack /usr/local/bin/embed-stack
COPY --from=build /src/lib/embed-stack /usr/local/lib/embed-stack

ENV HF_HOME=/data/huggingface \
	EMBED_STACK_MODEL=Qwen/Qwen3-Embedding-0.6B-GGUF:f16
VOLUME ["/data/huggingface"]
USER embed
EXPOSE 8080
# /ready answers 200 once the warm worker has loaded the model and takes requests
# (503 before, and while a crashed worker is replaced); /health would turn the
# container healthy while every request still got 503. The start period covers the
# first download and load of the model.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10m --retries=3 \
	CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/ready"]
ENTRYPOINT ["embed-stack"]
CMD ["serve", "--addr", "0.0.0.0:8080"]
