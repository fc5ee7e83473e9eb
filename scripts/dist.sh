#!/usr/bin/env bash
# dist.sh builds the release archives that `make dist` writes into dist/: one
# embed-stack-VERSION-linux-ARCH.tar.gz per platform, and SHA256SUMS over them.
#
#   scripts/dist.sh VERSION COMMIT PLATFORM...      (PLATFORM: linux/amd64, linux/arm64)
#
# Each archive holds one folder, embed-stack-VERSION-linux-ARCH/, laid out as the
# binary expects to find its loadable libraries (backends/llama's BackendDirName):
#
#   bin/embed-stack       the binary (cgo, llama.cpp compiled in)
#   lib/embed-stack/      loadable ggml libraries: the CPU kernel variants
#                         (libggml-cpu-NAME.so, built here with `make cpu-variants`) and
#                         the ggml core they link against (libggml-base.so.0, a plain
#                         file under the name the libraries ask for), and the GPU
#                         backends of the host's lib/embed-stack when built (`make cuda`)
#   README.md             what it is, what the host needs, how to run it
#
# The compiled-in CPU kernels target a conservative baseline (DIST_MARCH_amd64, default
# x86-64-v2: SSE4.2, any x86-64 server since about 2009; DIST_MARCH_arm64, default
# armv8-a), recorded in the binary; each worker loads the best CPU variant for its CPU
# (docs/building.md, "CPU kernel variants"). DIST_CPU_VARIANTS names the variants to
# build ("haswell zen4"; default all of the architecture; "none" for none). libstdc++ and libgcc are linked statically, so the binary needs only glibc
# (2.36 or later: Debian 12, Ubuntu 23.04, RHEL 10; the static libstdc++ of GCC 12 calls
# arc4random, new in 2.36). An arm64 archive is cross-compiled
# with Debian's g++-aarch64-linux-gnu. The archives are reproducible: sorted entries,
# root-owned, every mtime the commit's time, gzip without a timestamp.
set -euo pipefail

version=$1 commit=$2
shift 2
[[ $# -gt 0 ]] || { echo "dist.sh: no platform given" >&2; exit 2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO=${GO:-go}
out=dist
host_arch=$($GO env GOARCH)
# The commit's time, so that two builds of one commit give the same archive bytes.
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)

mkdir -p "$out"
archives=()
for platform in "$@"; do
	os=${platform%%/*} arch=${platform##*/}
	[[ $os == linux ]] || { echo "dist.sh: $platform: only linux archives are built" >&2; exit 2; }
	name=embed-stack-$version-$os-$arch
	stage=$out/$name
	rm -rf "$stage" "$out/$name.tar.gz"
	mkdir -p "$stage/bin" "$stage/lib/embed-stack"

	cross=() cpu_cross=()
	case $arch in
	amd64) march=${DIST_MARCH_amd64:-x86-64-v2} ;;
	arm64) march=${DIST_MARCH_arm64:-armv8-a} ;;
	*) echo "dist.sh: $platform: unsupported architecture" >&2; exit 2 ;;
	esac
	if [[ $arch != "$host_arch" ]]; then
		prefix=${DIST_CROSS_PREFIX_arm64:-aarch64-linux-gnu-}
		[[ $arch == arm64 ]] || { echo "dist.sh: no cross compiler known for $arch" >&2; exit 2; }
		command -v "${prefix}g++" >/dev/null || {
			echo "dist.sh: $platform needs ${prefix}g++ (apt-get install g++-aarch64-linux-gnu), or leave it out: make dist DIST_PLATFORMS=linux/$host_arch" >&2
			exit 1
		}
		cross=(CC="${prefix}gcc" CXX="${prefix}g++")
		cpu_cross=(CPU_CROSS="${prefix%-}")
	fi

	echo "dist: $name (-march=$march)"
	# The Makefile's cgo flags for this target (cgo-env), so that the build cache is
	# shared with every other build of the same MARCH.
	env_lines=$(MAKEFLAGS= MAKELEVEL= GOARCH=$arch make -s --no-print-directory cgo-env MARCH="$march" ${STANDIN_INCLUDE:+STANDIN_INCLUDE=$STANDIN_INCLUDE})
	(
		eval "$env_lines"
		env GOOS=$os GOARCH=$arch "${cross[@]}" CGO_LDFLAGS="${CGO_LDFLAGS:-} -static-libstdc++ -static-libgcc" \
			$GO build -trimpath -ldflags "-X github.com/embed-stack/embed-stack/internal/buildinfo.Version=$version -X github.com/embed-stack/embed-stack/internal/buildinfo.Commit=$commit -X github.com/embed-stack/embed-stack/internal/buildinfo.CPUBaseline=$march" \
			-o "$stage/bin/embed-stack" ./cmd/embed-stack
	)

	# The CPU kernel variants, built for this architecture into a folder of their
	# own, and the libggml-base.so.0 they need, as plain files (the archive holds no
	# links).
	want_machine=$([[ $arch == amd64 ]] && echo "X86-64" || echo "AArch64")
	variants=${DIST_CPU_VARIANTS-}
	if [[ $variants != none ]]; then
		vdir=$root/$out/.cpu-variants-$arch
		rm -rf "$vdir"
		MAKEFLAGS= MAKELEVEL= make -s --no-print-directory cpu-variants BACKEND_DIR="$vdir" CPU_VARIANTS="$variants" \
			"${cpu_cross[@]}" ${STANDIN_INCLUDE:+STANDIN_INCLUDE=$STANDIN_INCLUDE} >/dev/null
		for lib in "$vdir"/libggml-cpu-*.so "$vdir"/libggml-base.so.0; do
			machine=$(LC_ALL=C readelf -h "$lib" | sed -n 's/^ *Machine: *//p')
			[[ $machine == *"$want_machine"* ]] || { echo "dist.sh: $lib is for $machine, not $arch" >&2; exit 1; }
			cp -L "$lib" "$stage/lib/embed-stack/"
		done
		rm -rf "$vdir"
	fi

	# Other loadable libraries (GPU backends): the host's lib/embed-stack/ for the host's
	# architecture, DIST_LIB_DIR_<arch> for another one; each must be an ELF file of that
	# architecture. Its CPU variants and libggml-base are left to the build above.
	libdir_var=DIST_LIB_DIR_$arch
	libdir=${!libdir_var:-}
	[[ -n $libdir || $arch != "$host_arch" ]] || libdir=lib/embed-stack
	if [[ -n $libdir && -d $libdir ]]; then
		for lib in "$libdir"/*.so; do
			[[ -e $lib ]] || continue
			case ${lib##*/} in libggml-cpu-*|libggml-base.so) continue ;; esac
			machine=$(LC_ALL=C readelf -h "$lib" | sed -n 's/^ *Machine: *//p')
			[[ $machine == *"$want_machine"* ]] || { echo "dist.sh: $lib is for $machine, not $arch" >&2; exit 1; }
			cp "$lib" "$stage/lib/embed-stack/"
			# A GPU backend links libggml-base.so.0 too.
			if [[ ! -e $stage/lib/embed-stack/libggml-base.so.0 && -e $libdir/libggml-base.so.0 ]]; then
				cp -L "$libdir/libggml-base.so.0" "$stage/lib/embed-stack/"
			fi
		done
	fi

	sed -e "s/@VERSION@/$version/g" -e "s/@COMMIT@/$commit/g" -e "s/@PLATFORM@/$os-$arch/g" -e "s/@MARCH@/$march/g" \
		scripts/dist-README.md >"$stage/README.md"

	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
		-C "$out" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
	rm -rf "$stage"
	archives+=("$name.tar.gz")
done

# One SHA256SUMS for every archive in dist/ of this version (`sha256sum -c` format).
(cd "$out" && sha256sum embed-stack-"$version"-*.tar.gz >SHA256SUMS)
echo "dist: wrote ${archives[*]} and SHA256SUMS in $out/"
