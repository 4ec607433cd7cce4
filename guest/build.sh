#!/usr/bin/env bash
# Builds the Spine Guest: CPython 3.11.2 for wasm32-wasi as a WASI reactor with the
# builtin module _spine and the batteries (zlib, bz2, lzma, sqlite3), plus the standard
# library and the IANA time-zone database as precompiled .pyc and data in a stored zip.
#
#   guest/build.sh            build (idempotent) and write guest/artifact/
#   guest/build.sh --check    rebuild in a scratch folder and compare with guest/artifact/
#   guest/build.sh --source-only
#                             fetch, verify and extract CPython's source only, and print
#                             its folder (make cpython-tests runs its Lib/test)
#   guest/build.sh --python-only
#                             after a change to the Guest's own Python (guest/python) alone:
#                             compile those modules anew into the committed python311.zip
#                             and update the manifest's hashes, in seconds; the zip is the
#                             one a whole build makes (mkstdlib.py --repack; guest-check
#                             rebuilds everything and compares)
#
#   SPINE_GUEST_LTO=full guest/build.sh
#                             a variant for measurement (spine bench --variant), not the
#                             committed artifact: CPython with full link-time optimisation
#                             (configure --with-lto=full, llvm-19's llvm-ar, wasm-ld at
#                             --lto-O3). Use its own SPINE_GUEST_WORK and copy the artifact
#                             out of guest/artifact before restoring it with git.
#
# Everything comes from Debian's packages: clang-19, lld-19, wasi-libc,
# libclang-rt-19-dev-wasm32, tcl (to generate SQLite's amalgamation), libc-bin's zic, and
# the source packages python3.11, zlib, bzip2, xz-utils and sqlite3, and the tzdata
# package. Every one of those is pinned by version and sha256. Nothing else is fetched.
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
--python-only)
	# Only the Guest's Python changed: the C, the patches and the build's other inputs
	# must be those the manifest records, or the artifact would not be theirs. The three
	# scripts that make the artifact may have changed with it (this one included): make
	# guest-check rebuilds everything and compares.
	py=/usr/bin/python3.11
	"$py" -c 'import sys; assert sys.version_info[:3] == (3, 11, 2), sys.version' ||
		{ printf '[guest] %s must be exactly 3.11.2 (it compiles the modules)\n' "$py" >&2; exit 1; }
	"$py" -I - "$root" "$out/manifest.json" <<-'EOF' || exit 1
		import hashlib, json, pathlib, sys
		root, manifest = pathlib.Path(sys.argv[1]), json.loads(pathlib.Path(sys.argv[2]).read_text())
		scripts = {"guest/build.sh", "guest/mkstdlib.py", "guest/mkmanifest.py"}
		changed = [rel for rel, sha in manifest["sources"].items() if not rel.startswith("guest/python/") and rel not in scripts
		           and (not (root / rel).exists() or hashlib.sha256((root / rel).read_bytes()).hexdigest() != sha)]
		if changed:
		    sys.exit("[guest] --python-only: these changed too, run guest/build.sh: " + ", ".join(changed))
	EOF
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	"$py" -I "$here/mkstdlib.py" --repack "$out/python311.zip" --old-manifest "$out/manifest.json" \
		--guest "$here/python" --out "$tmp/python311.zip"
	cp "$tmp/python311.zip" "$out/python311.zip"
	licences=$(cd "$out" && ls LICENSE.*)
	"$py" -I "$here/mkmanifest.py" --root "$root" --update "$out/manifest.json" --out "$out" $licences >"$tmp/manifest.json"
	cp "$tmp/manifest.json" "$out/manifest.json"
	printf '[guest] repacked the Guest'"'"'s Python into %s\n' "$out/python311.zip" >&2
	exit 0
	;;
"") ;;
*) printf '[guest] unknown argument %s (want --check, --source-only or --python-only)\n' "$1" >&2; exit 2 ;;
esac

py_version=3.11.2
py_tarball=python3.11_${py_version}.orig.tar.gz
py_sha256=2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849
# The batteries' Debian source packages: version, then every file with its sha256.
zlib_version=1:1.2.13.dfsg-1
zlib_files=(
	zlib_1.2.13.dfsg-1.dsc=3fa1e6b2fc525062aa88207dda52fed8e045373c809d362fe8a2bfbf7cf515a8
	zlib_1.2.13.dfsg.orig.tar.bz2=71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1
	zlib_1.2.13.dfsg-1.debian.tar.xz=f66cf3d4f2d7defcd4d1fd1fb0a11ee39f1e01b42ec7d059c9dc5c1695133c44
)
bzip2_version=1.0.8-5
bzip2_files=(
	bzip2_1.0.8-5.dsc=ed9c40f4de3f9e064535e15eac1c61a0f606763db98f4579dbc04067b94a8944
	bzip2_1.0.8.orig.tar.gz=ab5a03176ee106d3f0fa90e381da478ddae405918153cca248e682cd0c4a2269
	bzip2_1.0.8-5.debian.tar.bz2=d68c6eba11d70e14319e24ef1451880a03023b2b75364646adb117086db36039
)
xz_version=5.4.1-1+deb12u2
xz_files=(
	xz-utils_5.4.1-1+deb12u2.dsc=bffc9917562b5787661379621bb1f7510bf7271b03d8ce4181cebc84b90d3c35
	xz-utils_5.4.1.orig.tar.xz=5d9827aa1875b21c288f78864bb26d2650b436ea8d2cad364e4921eb6266a5a5
	xz-utils_5.4.1-1+deb12u2.debian.tar.xz=7e0b1d1448520ea4f88ec05136a88f07564cc4a1abd6dfcf53c1f822a3e4f64f
)
sqlite_version=3.40.1-2+deb12u2
sqlite_files=(
	sqlite3_3.40.1-2+deb12u2.dsc=ee3459ae9d00939741c7708fc1b8ce1bde12d8c3fb1dfa005bbbc8651d884e23
	sqlite3_3.40.1.orig.tar.xz=aaa776260ab4dc976db34aa7891819484c8676b5b2783123ebc6301e2ca5d655
	sqlite3_3.40.1.orig-www.tar.xz=a5e95a18d1b59729278860559ded78751b9163ffb5bb906c5cd24c015f71d5fd
	sqlite3_3.40.1-2+deb12u2.debian.tar.xz=0843bc12e4364076477935ce313a6d0796fd899a989ff18ebb6545540e10e4ca
)
# The time-zone database: the archive answers 404 for tzdata 2026f's source package, so
# its data comes from the binary package, whose tzdata.zi is the whole database in
# zic's input form; the build's zic compiles it.
tzdata_version=2026f-0+deb12u1
tzdata_deb=tzdata_2026f-0+deb12u1_all.deb
tzdata_sha256=3254eb870c8a949518214805aee5e4276af7699988ea8b9a3a583cd0f1eab31c
llvm=/usr/lib/llvm-19/bin
python_build=/usr/bin/python3.11
jobs=$(nproc 2>/dev/null || echo 2)
# The same inputs give the same bytes: clang takes __DATE__ and __TIME__ (CPython's build
# info, sys.version) from SOURCE_DATE_EPOCH, here CPython 3.11.2's release day.
export SOURCE_DATE_EPOCH=1675814400
export LC_ALL=C

log() { printf '[guest] %s\n' "$*" >&2; }

# 1. Toolchain from Debian's packages (the source alone needs only Python and apt's source tools).
need_pkgs=()
if [ $source_only = 0 ]; then
	[ -x "$llvm/clang" ] || need_pkgs+=(clang-19)
	[ -x "$llvm/wasm-ld" ] || need_pkgs+=(lld-19)
	[ -f /usr/lib/wasm32-wasi/libc.a ] || need_pkgs+=(wasi-libc)
	[ -f /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a ] || need_pkgs+=(libclang-rt-19-dev-wasm32)
	command -v tclsh8.6 >/dev/null || need_pkgs+=(tcl8.6)
	command -v make >/dev/null || need_pkgs+=(make)
	[ -x /usr/sbin/zic ] || need_pkgs+=(libc-bin)
fi
[ -x "$python_build" ] || need_pkgs+=(python3.11)
command -v dpkg-source >/dev/null || need_pkgs+=(dpkg-dev)
command -v patch >/dev/null || need_pkgs+=(patch)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	log "installing ${need_pkgs[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
"$python_build" -c 'import sys; assert sys.version_info[:3] == (3, 11, 2), sys.version' ||
	{ log "$python_build must be exactly $py_version (it is the build Python)"; exit 1; }

# 2. Sources from Debian's source packages, each file checked against its sha256.
mkdir -p "$work/src"
enable_deb_src() {
	local src_list=/etc/apt/sources.list.d/spine-deb-src.sources
	if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null; then
		log "enabling deb-src entries derived from debian.sources"
		sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$src_list"
		apt-get update -qq
	fi
}
# verify FILE SHA256: FILE in $work/src has that sha256.
verify() {
	echo "$2  $work/src/$1" | sha256sum -c --quiet - 2>/dev/null ||
		{ log "$1 does not have the expected sha256 $2"; exit 1; }
}
# fetch_source PACKAGE[=VERSION] FILE=SHA256...: the files of a source package.
fetch_source() {
	local pkg=$1 pair missing=0
	shift
	for pair in "$@"; do [ -f "$work/src/${pair%%=*}" ] || missing=1; done
	if [ $missing = 1 ]; then
		enable_deb_src
		log "fetching the ${pkg%%=*} source package"
		# A file of the package the build does not need (the Debian patch tarball of the
		# newest python3.11) may be missing; only the files listed must be there.
		(cd "$work/src" && apt-get source --download-only "$pkg" >/dev/null 2>&1 || true)
	fi
	for pair in "$@"; do
		[ -f "$work/src/${pair%%=*}" ] || { log "could not fetch ${pair%%=*}"; exit 1; }
		verify "${pair%%=*}" "${pair#*=}"
	done
}
fetch_source python3.11 "$py_tarball=$py_sha256"
if [ $source_only = 0 ]; then
	fetch_source "zlib=$zlib_version" "${zlib_files[@]}"
	fetch_source "bzip2=$bzip2_version" "${bzip2_files[@]}"
	fetch_source "xz-utils=$xz_version" "${xz_files[@]}"
	fetch_source "sqlite3=$sqlite_version" "${sqlite_files[@]}"
	if [ ! -f "$work/src/$tzdata_deb" ]; then
		log "fetching the tzdata package"
		(cd "$work/src" && apt-get download "tzdata=$tzdata_version" >/dev/null 2>&1 || true)
		[ -f "$work/src/$tzdata_deb" ] || { log "could not fetch $tzdata_deb"; exit 1; }
	fi
	verify "$tzdata_deb" "$tzdata_sha256"
fi

cpython=$work/Python-$py_version
if [ ! -f "$cpython/.extracted" ]; then
	rm -rf "$cpython"
	tar -C "$work" -xzf "$work/src/$py_tarball"
	touch "$cpython/.extracted"
fi
# The Guest's patches to CPython (guest/cpython/*.patch, applied in name order). When
# they change, the files they touch, now or before, are taken afresh from the tarball
# (dated now, so that make rebuilds what uses them) and the patches applied again.
patches=("$here"/cpython/*.patch)
patched=$(cat "${patches[@]}" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$cpython/.patched" 2>/dev/null)" != "$patched" ]; then
	patched_files() { sed -n 's,^+++ b/\([^[:space:]]*\).*,\1,p' "${patches[@]}" | sort -u; }
	touched=$({ cat "$cpython/.patched-files" 2>/dev/null || true; patched_files; } | sort -u)
	# shellcheck disable=SC2046 # one tar member per line, no spaces in CPython's paths
	tar -C "$work" -xzmf "$work/src/$py_tarball" $(printf "Python-$py_version/%s\n" $touched)
	for p in "${patches[@]}"; do
		log "patching CPython: ${p#"$root"/}"
		patch -s -p1 -d "$cpython" <"$p"
	done
	patched_files >"$cpython/.patched-files"
	printf '%s' "$patched" >"$cpython/.patched"
fi
if [ $source_only = 1 ]; then
	echo "$cpython"
	exit 0
fi
deps=$work/deps
mkdir -p "$deps/include" "$deps/lib"
# unpack NAME DSC: the source package with Debian's patches applied, in $deps/NAME.
unpack() {
	if [ "$(cat "$deps/$1/.extracted" 2>/dev/null)" != "$2" ]; then
		rm -rf "${deps:?}/$1"
		dpkg-source -x "$work/src/$2" "$deps/$1" >/dev/null 2>&1 ||
			{ log "dpkg-source could not unpack $2"; exit 1; }
		echo "$2" >"$deps/$1/.extracted"
	fi
}
unpack zlib "${zlib_files[0]%%=*}"
unpack bzip2 "${bzip2_files[0]%%=*}"
unpack xz "${xz_files[0]%%=*}"
unpack sqlite "${sqlite_files[0]%%=*}"

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
cc="$sdk/bin/clang --sysroot=$sdk/share/wasi-sysroot"

# 4. The batteries' C libraries for wasm32-wasi, static, in $deps/lib with their headers
# in $deps/include. Each is rebuilt only when its recipe (the stamp's text) changes.
# -ffile-prefix-map keeps the build folder's name out of the objects.
lib_cflags="-O2 -DNDEBUG -ffile-prefix-map=$work=/build"
# built NAME RECIPE: whether NAME was built with RECIPE (else the caller builds it and
# then calls stamp NAME RECIPE).
built() { [ -f "$deps/$1.stamp" ] && [ "$(cat "$deps/$1.stamp")" = "$2" ]; }
stamp() { printf '%s' "$2" >"$deps/$1.stamp"; }
# archive NAME SRC FILES...: compile FILES (relative to SRC) and archive them as libNAME.a.
archive() {
	local name=$1 src=$2 obj=$deps/obj-$1 f
	shift 2
	rm -rf "$obj" && mkdir -p "$obj"
	for f in "$@"; do
		$cc $lib_cflags ${extra_cflags:-} -c "$src/$f" -o "$obj/${f//\//_}.o" 2>>"$deps/$name.log" ||
			{ tail -20 "$deps/$name.log" >&2; exit 1; }
	done
	rm -f "$deps/lib/lib$name.a"
	(cd "$obj" && "$llvm/llvm-ar" rcsD "$deps/lib/lib$name.a" $(ls))
}

recipe="zlib $zlib_version $lib_cflags -DHAVE_UNISTD_H"
if ! built zlib "$recipe"; then
	log "building zlib"
	extra_cflags=-DHAVE_UNISTD_H archive z "$deps/zlib" adler32.c compress.c crc32.c deflate.c \
		gzclose.c gzlib.c gzread.c gzwrite.c infback.c inffast.c inflate.c inftrees.c trees.c \
		uncompr.c zutil.c
	cp "$deps/zlib/zlib.h" "$deps/zlib/zconf.h" "$deps/include/"
	stamp zlib "$recipe"
fi

recipe="bzip2 $bzip2_version $lib_cflags"
if ! built bzip2 "$recipe"; then
	log "building bzip2"
	archive bz2 "$deps/bzip2" blocksort.c huffman.c crctable.c randtable.c compress.c \
		decompress.c bzlib.c
	cp "$deps/bzip2/bzlib.h" "$deps/include/"
	stamp bzip2 "$recipe"
fi

# liblzma through its own configure, without threads. Its single-threaded mythread.h
# defines a signal-mask helper (for the xz tool, never called by the library) that
# needs sigprocmask, which WASI lacks: a header included first gives it.
xz_compat='/* For liblzma'"'"'s mythread.h: WASI has no signal masks. */
#include <sys/select.h>
static inline int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{ (void)how; (void)set; (void)old; return 0; }'
xz_cflags="$lib_cflags -D_WASI_EMULATED_SIGNAL -include $deps/xz-compat.h"
recipe="xz $xz_version $xz_cflags --disable-threads $xz_compat"
if ! built xz "$recipe"; then
	log "building liblzma"
	printf '%s\n' "$xz_compat" >"$deps/xz-compat.h"
	rm -rf "$deps/xz-build" && mkdir -p "$deps/xz-build"
	(cd "$deps/xz-build" && CC="$cc" AR="$llvm/llvm-ar" RANLIB="$llvm/llvm-ranlib" CFLAGS="$xz_cflags" \
		../xz/configure --host=wasm32-unknown-wasi --build="$("$deps/xz/build-aux/config.guess")" \
		--enable-static --disable-shared --disable-threads --disable-xz --disable-xzdec \
		--disable-lzmadec --disable-lzmainfo --disable-lzma-links --disable-scripts --disable-doc \
		--disable-nls --disable-rpath >configure.log 2>&1 &&
		make -C src/liblzma -j"$jobs" >make.log 2>&1) ||
		{ tail -n 30 "$deps/xz-build/configure.log" "$deps/xz-build/make.log" >&2; exit 1; }
	cp "$deps/xz-build/src/liblzma/.libs/liblzma.a" "$deps/lib/liblzma.a"
	rm -rf "$deps/include/lzma" && cp -r "$deps/xz/src/liblzma/api/lzma.h" "$deps/xz/src/liblzma/api/lzma" "$deps/include/"
	stamp xz "$recipe"
fi

# SQLite: the amalgamation (sqlite3.c) is generated from the patched source tree with
# the build machine's clang and tclsh, then compiled for the Guest with its own VFS
# (guest/c/sqlite_vfs.c, which says why). The defines: one thread; no extension loading;
# no WAL and no mmap (WASI has no shared memory); temporary files and tables in memory.
sqlite_defines="-DSQLITE_OS_OTHER=1 -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION \
-DSQLITE_OMIT_WAL -DSQLITE_MAX_MMAP_SIZE=0 -DSQLITE_TEMP_STORE=3 -DSQLITE_DEFAULT_MEMSTATUS=0 \
-DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_ENABLE_FTS5"
recipe="sqlite $sqlite_version $lib_cflags $sqlite_defines $(sha256sum "$here/c/sqlite_vfs.c" | cut -d' ' -f1)"
if ! built sqlite "$recipe"; then
	if ! built sqlite-amalgamation "$sqlite_version"; then
		log "generating SQLite's amalgamation"
		rm -rf "$deps/sqlite-native" && mkdir -p "$deps/sqlite-native"
		(cd "$deps/sqlite-native" && CC="$llvm/clang" ../sqlite/configure --disable-tcl >configure.log 2>&1 &&
			make sqlite3.c >make.log 2>&1) ||
			{ tail -n 30 "$deps/sqlite-native/configure.log" "$deps/sqlite-native/make.log" >&2; exit 1; }
		mkdir -p "$deps/sqlite-amalgamation"
		cp "$deps/sqlite-native/sqlite3.c" "$deps/sqlite-native/sqlite3.h" "$deps/sqlite-amalgamation/"
		stamp sqlite-amalgamation "$sqlite_version"
	fi
	log "building SQLite"
	cp "$deps/sqlite-amalgamation/sqlite3.h" "$deps/include/"
	cp "$here/c/sqlite_vfs.c" "$deps/sqlite-amalgamation/"
	extra_cflags="$sqlite_defines -I$deps/include" archive sqlite3 "$deps/sqlite-amalgamation" sqlite3.c sqlite_vfs.c
	stamp sqlite "$recipe"
fi

# The time-zone database, compiled by zic into the layout of /usr/share/zoneinfo.
tz_recipe="tzdata $tzdata_version $(/usr/sbin/zic --version)"
if ! built tzdata "$tz_recipe"; then
	log "compiling the time-zone database"
	rm -rf "$deps/tzdata" "$deps/zoneinfo" && mkdir -p "$deps/tzdata"
	dpkg-deb -x "$work/src/$tzdata_deb" "$deps/tzdata"
	/usr/sbin/zic -b slim -d "$deps/zoneinfo" "$deps/tzdata/usr/share/zoneinfo/tzdata.zi"
	stamp tzdata "$tz_recipe"
fi

# 5. Configure and build libpython for wasm32-wasi, with the batteries as builtin modules.
bld=$cpython/builddir/wasi
mkdir -p "$bld"
batteries=(
	"ZLIB_CFLAGS=-I$deps/include" "ZLIB_LIBS=-L$deps/lib -lz"
	"BZIP2_CFLAGS=-I$deps/include" "BZIP2_LIBS=-L$deps/lib -lbz2"
	"LIBLZMA_CFLAGS=-I$deps/include" "LIBLZMA_LIBS=-L$deps/lib -llzma"
	"LIBSQLITE3_CFLAGS=-I$deps/include" "LIBSQLITE3_LIBS=-L$deps/lib -lsqlite3"
)
lto=${SPINE_GUEST_LTO:-}
lto_configure=()
lto_link=()
case "$lto" in
"") ;;
full)
	lto_configure=(--with-lto=full "LLVM_AR=$llvm/llvm-ar")
	lto_link=(-Wl,--lto-O3)
	;;
*) log "SPINE_GUEST_LTO=$lto: want full or nothing"; exit 2 ;;
esac
site=$work/config.site-spine
{
	cat "$cpython/Tools/wasm/config.site-wasm32-wasi"
	echo '# Spine: wazero runs relative sleeps only'
	echo 'ac_cv_func_clock_nanosleep=no'
	echo 'ac_cv_lib_rt_clock_nanosleep=no'
	echo "# Setup.local: $(sha256sum "$here/Setup.local" | cut -d' ' -f1)"
	echo "# batteries: ${batteries[*]} $(cat "$deps"/{zlib,bzip2,xz,sqlite}.stamp | sha256sum | cut -d' ' -f1)"
	[ -z "$lto" ] || echo "# link-time optimisation: $lto"
} >"$site.new"
if ! cmp -s "$site.new" "$site" || [ ! -f "$bld/config.status" ]; then
	# A build configured otherwise before leaves objects that make would
	# keep: they go first. A first build has none.
	if [ -f "$bld/Makefile" ]; then
		log "cleaning the earlier CPython build"
		(cd "$bld" && WASI_SDK_PATH=$sdk "$cpython/Tools/wasm/wasi-env" make clean >clean.log 2>&1) ||
			{ tail -20 "$bld/clean.log" >&2; exit 1; }
	fi
	mkdir -p "$bld/Modules"
	cp "$here/Setup.local" "$bld/Modules/Setup.local"
	mv "$site.new" "$site"
	log "configuring CPython"
	(cd "$bld" && rm -f config.cache && CONFIG_SITE=$site WASI_SDK_PATH=$sdk \
		"$cpython/Tools/wasm/wasi-env" ../../configure -C --host=wasm32-unknown-wasi \
		--build="$(../../config.guess)" --with-build-python="$python_build" "${batteries[@]}" ${lto_configure[@]+"${lto_configure[@]}"} >configure.log 2>&1) ||
		{ tail -30 "$bld/configure.log" >&2; exit 1; }
	for module in zlib _bz2 _lzma _sqlite3; do
		grep -q "^MODULE_$(echo "$module" | tr a-z A-Z)_STATE=yes" "$bld/Makefile" ||
			{ log "configure did not enable $module (see $bld/config.log)"; rm -f "$site"; exit 1; }
	done
else
	rm -f "$site.new"
fi
# The build info is compiled every time, so no build keeps the date of an earlier one.
rm -f "$bld/Modules/getbuildinfo.o"
log "building CPython (make -j$jobs)"
(cd "$bld" && WASI_SDK_PATH=$sdk "$cpython/Tools/wasm/wasi-env" make -j"$jobs" >make.log 2>&1) ||
	{ tail -40 "$bld/make.log" >&2; exit 1; }

# 6. The reactor: _spine and the Guest exports, linked against libpython and the batteries.
log "linking spine.wasm"
$cc -O2 -c -I"$cpython/Include" -I"$bld" -o "$work/spine.o" "$here/c/spine.c"
# The link has no -O flag: with one, clang runs binaryen's wasm-opt on the
# linked module whenever one is on PATH, so the output would depend on what
# else the machine has installed (clang-19's --no-wasm-opt drops the link).
$cc -mexec-model=reactor -z stack-size=8388608 -Wl,--stack-first \
	-Wl,--initial-memory=33554432 -Wl,--max-memory=536870912 ${lto_link[@]+"${lto_link[@]}"} \
	-o "$work/spine.wasm" "$work/spine.o" "$bld/libpython3.11.a" \
	"$bld/Modules/_decimal/libmpdec/libmpdec.a" "$bld/Modules/expat/libexpat.a" \
	"$deps/lib/libz.a" "$deps/lib/libbz2.a" "$deps/lib/liblzma.a" "$deps/lib/libsqlite3.a" \
	-lwasi-emulated-signal -lwasi-emulated-getpid -lwasi-emulated-process-clocks -lm
mkdir -p "$out"
"$llvm/llvm-strip" -o "$out/spine.wasm" "$work/spine.wasm"

# 7. The standard library, the Guest's Python and the time-zone database, in a stored zip.
log "packing the standard library"
"$python_build" -I "$here/mkstdlib.py" --lib "$cpython/Lib" --build "$bld" \
	--guest "$here/python" --work "$work" --tzdata "$deps/zoneinfo" --tzversion "${tzdata_version%%-*}" \
	--out "$out/python311.zip"
cp "$cpython/LICENSE" "$out/LICENSE.python"
# The batteries' licences, as each Debian package states them.
cp "$deps/zlib/debian/copyright" "$out/LICENSE.zlib"
cp "$deps/bzip2/debian/copyright" "$out/LICENSE.bzip2"
cp "$deps/xz/debian/copyright" "$out/LICENSE.xz"
cp "$deps/sqlite/debian/copyright" "$out/LICENSE.sqlite3"
cp "$deps/tzdata/usr/share/doc/tzdata/copyright" "$out/LICENSE.tzdata"
licences="LICENSE.python LICENSE.zlib LICENSE.bzip2 LICENSE.xz LICENSE.sqlite3 LICENSE.tzdata"

# 8. The manifest: every input's hash and every output's hash.
inputs=()
for pair in "${zlib_files[@]}"; do inputs+=(--input "zlib=$zlib_version=$work/src/${pair%%=*}"); done
for pair in "${bzip2_files[@]}"; do inputs+=(--input "bzip2=$bzip2_version=$work/src/${pair%%=*}"); done
for pair in "${xz_files[@]}"; do inputs+=(--input "xz-utils=$xz_version=$work/src/${pair%%=*}"); done
for pair in "${sqlite_files[@]}"; do inputs+=(--input "sqlite3=$sqlite_version=$work/src/${pair%%=*}"); done
inputs+=(--input "tzdata=$tzdata_version=$work/src/$tzdata_deb")
"$python_build" -I "$here/mkmanifest.py" --root "$root" --tarball "$work/src/$py_tarball" \
	"${inputs[@]}" --out "$out" $licences >"$out/manifest.json"

if [ $check = 1 ]; then
	status=0
	for f in spine.wasm python311.zip manifest.json $licences; do
		if cmp -s "$out/$f" "$here/artifact/$f"; then log "same: $f"; else log "DIFFERS: $f"; status=1; fi
	done
	exit $status
fi
log "done: $(du -h "$out/spine.wasm" | cut -f1) spine.wasm, $(du -h "$out/python311.zip" | cut -f1) python311.zip"
