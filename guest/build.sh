#!/usr/bin/env bash
# Builds the Spine Guest: CPython 3.11.2 for wasm32-wasi as a WASI reactor with the
# builtin module _spine, plus the standard library as precompiled .pyc in a stored zip.
#
#   guest/build.sh            build (idempotent) and write guest/artifact/
#   guest/build.sh --check    rebuild in a scratch folder and compare with guest/artifact/
#   guest/build.sh --source-only
#                             fetch, verify and extract CPython's source only, and print
#                             its folder (make cpython-tests runs its Lib/test)
#
# Everything comes from Debian's packages: clang-19, lld-19, wasi-libc,
# libclang-rt-19-dev-wasm32 and the python3.11 source package. Nothing else is fetched.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${SPINE_GUEST_WORK:-$root/build/guest}
mkdir -p "$work"
work=$(cd "$work" && pwd)
out=$here/artifact
check=0
source_only=0
case "${1:-}" in
--check)
	check=1
	out=$work/check-artifact
	;;
--source-only) source_only=1 ;;
"") ;;
*) printf '[guest] unknown argument %s (want --check or --source-only)\n' "$1" >&2; exit 2 ;;
esac

py_version=3.11.2
py_tarball=python3.11_${py_version}.orig.tar.gz
py_sha256=2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849
llvm=/usr/lib/llvm-19/bin
python_build=/usr/bin/python3.11
jobs=$(nproc 2>/dev/null || echo 2)
# The same inputs give the same bytes: clang takes __DATE__ and __TIME__ (CPython's build
# info, sys.version) from SOURCE_DATE_EPOCH, here CPython 3.11.2's release day.
export SOURCE_DATE_EPOCH=1675814400

log() { printf '[guest] %s\n' "$*" >&2; }

# 1. Toolchain from Debian's packages (the source alone needs only Python and apt's source tools).
need_pkgs=()
if [ $source_only = 0 ]; then
	[ -x "$llvm/clang" ] || need_pkgs+=(clang-19)
	[ -x "$llvm/wasm-ld" ] || need_pkgs+=(lld-19)
	[ -f /usr/lib/wasm32-wasi/libc.a ] || need_pkgs+=(wasi-libc)
	[ -f /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a ] || need_pkgs+=(libclang-rt-19-dev-wasm32)
fi
[ -x "$python_build" ] || need_pkgs+=(python3.11)
command -v dpkg-source >/dev/null || need_pkgs+=(dpkg-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	log "installing ${need_pkgs[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
"$python_build" -c 'import sys; assert sys.version_info[:3] == (3, 11, 2), sys.version' ||
	{ log "$python_build must be exactly $py_version (it is the build Python)"; exit 1; }

# 2. CPython's source from Debian's source package (pristine upstream tarball).
mkdir -p "$work/src"
if [ ! -f "$work/src/$py_tarball" ]; then
	src_list=/etc/apt/sources.list.d/spine-deb-src.sources
	if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null; then
		log "enabling deb-src entries derived from debian.sources"
		sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$src_list"
		apt-get update -qq
	fi
	log "fetching the python3.11 source package"
	# The Debian patch tarball of the newest revision may be missing; the orig tarball is all we need.
	(cd "$work/src" && apt-get source --download-only python3.11 >/dev/null 2>&1 || true)
	[ -f "$work/src/$py_tarball" ] || { log "could not fetch $py_tarball"; exit 1; }
fi
echo "$py_sha256  $work/src/$py_tarball" | sha256sum -c --quiet - ||
	{ log "$py_tarball does not have the expected sha256"; exit 1; }
cpython=$work/Python-$py_version
if [ ! -f "$cpython/.extracted" ]; then
	rm -rf "$cpython"
	tar -C "$work" -xzf "$work/src/$py_tarball"
	touch "$cpython/.extracted"
fi
if [ $source_only = 1 ]; then
	echo "$cpython"
	exit 0
fi

# 3. A WASI-SDK-shaped folder over Debian's llvm-19 and wasi-libc.
sdk=$work/sdk
mkdir -p "$sdk/bin" "$sdk/share/wasi-sysroot/include" "$sdk/share/wasi-sysroot/lib"
for tool in clang clang++ clang-cpp; do
	cat >"$sdk/bin/$tool" <<WRAP
#!/bin/sh
exec $llvm/$tool --target=wasm32-wasi -Wno-error=int-conversion -Wno-error=incompatible-function-pointer-types "\$@"
WRAP
	chmod +x "$sdk/bin/$tool"
done
ln -sfn "$llvm/wasm-ld" "$sdk/bin/wasm-ld"
ln -sfn "$llvm/llvm-ar" "$sdk/bin/llvm-ar"
ln -sfn "$llvm/llvm-ranlib" "$sdk/bin/ranlib"
ln -sfn /usr/include/wasm32-wasi "$sdk/share/wasi-sysroot/include/wasm32-wasi"
ln -sfn /usr/lib/wasm32-wasi "$sdk/share/wasi-sysroot/lib/wasm32-wasi"

# 4. Configure and build libpython for wasm32-wasi.
bld=$cpython/builddir/wasi
mkdir -p "$bld"
site=$work/config.site-spine
{
	cat "$cpython/Tools/wasm/config.site-wasm32-wasi"
	echo '# Spine: wazero runs relative sleeps only'
	echo 'ac_cv_func_clock_nanosleep=no'
	echo 'ac_cv_lib_rt_clock_nanosleep=no'
	echo "# Setup.local: $(sha256sum "$here/Setup.local" | cut -d' ' -f1)"
} >"$site.new"
if ! cmp -s "$site.new" "$site" || [ ! -f "$bld/config.status" ]; then
	mkdir -p "$bld/Modules"
	cp "$here/Setup.local" "$bld/Modules/Setup.local"
	mv "$site.new" "$site"
	log "configuring CPython"
	(cd "$bld" && rm -f config.cache && CONFIG_SITE=$site WASI_SDK_PATH=$sdk \
		"$cpython/Tools/wasm/wasi-env" ../../configure -C --host=wasm32-unknown-wasi \
		--build="$(../../config.guess)" --with-build-python="$python_build" >configure.log 2>&1) ||
		{ tail -30 "$bld/configure.log" >&2; exit 1; }
else
	rm -f "$site.new"
fi
# The build info is compiled every time, so no build keeps the date of an earlier one.
rm -f "$bld/Modules/getbuildinfo.o"
log "building CPython (make -j$jobs)"
(cd "$bld" && WASI_SDK_PATH=$sdk "$cpython/Tools/wasm/wasi-env" make -j"$jobs" >make.log 2>&1) ||
	{ tail -40 "$bld/make.log" >&2; exit 1; }

# 5. The reactor: _spine and the Guest exports, linked against libpython.
log "linking spine.wasm"
cc="$sdk/bin/clang --sysroot=$sdk/share/wasi-sysroot"
$cc -O2 -c -I"$cpython/Include" -I"$bld" -o "$work/spine.o" "$here/c/spine.c"
$cc -O2 -mexec-model=reactor -z stack-size=8388608 -Wl,--stack-first \
	-Wl,--initial-memory=33554432 -Wl,--max-memory=536870912 \
	-o "$work/spine.wasm" "$work/spine.o" "$bld/libpython3.11.a" \
	"$bld/Modules/_decimal/libmpdec/libmpdec.a" "$bld/Modules/expat/libexpat.a" \
	-lwasi-emulated-signal -lwasi-emulated-getpid -lwasi-emulated-process-clocks -lm
mkdir -p "$out"
"$llvm/llvm-strip" -o "$out/spine.wasm" "$work/spine.wasm"

# 6. The standard library and the Guest's Python, precompiled, in a stored zip.
log "packing the standard library"
"$python_build" -I "$here/mkstdlib.py" --lib "$cpython/Lib" --build "$bld" \
	--guest "$here/python" --work "$work" --out "$out/python311.zip"
cp "$cpython/LICENSE" "$out/LICENSE.python"

# 7. The manifest: every input's hash and every output's hash.
"$python_build" -I "$here/mkmanifest.py" --root "$root" --tarball "$work/src/$py_tarball" \
	--out "$out" >"$out/manifest.json"

if [ $check = 1 ]; then
	status=0
	for f in spine.wasm python311.zip manifest.json LICENSE.python; do
		if cmp -s "$out/$f" "$here/artifact/$f"; then log "same: $f"; else log "DIFFERS: $f"; status=1; fi
	done
	exit $status
fi
log "done: $(du -h "$out/spine.wasm" | cut -f1) spine.wasm, $(du -h "$out/python311.zip" | cut -f1) python311.zip"
