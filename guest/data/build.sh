#!/usr/bin/env bash
# Builds the data Guest: the default Guest's CPython 3.11.2 with numpy 1.24.2's and pandas
# 1.5.3's C modules linked in as built-in modules (spine.wasm), and numpy's, pandas',
# python-dateutil's, pytz's, six's, sympy's, mpmath's and PyYAML's Python as precompiled .pyc in a
# deflated zip (packages.zip). The standard library is the
# default Guest's python311.zip, which this Guest shares.
#
#   guest/data/build.sh          build (idempotent) and write guest/data/artifact/
#   guest/data/build.sh --check  rebuild in a scratch folder and compare with guest/data/artifact/
#   guest/data/build.sh --python-only
#                                after a change to the pure-Python packages alone (a Debian
#                                package added or moved on, pytz.patch, python/): pack them
#                                anew into the committed packages.zip, numpy's and pandas'
#                                entries and pytz's zones taken from it as they are, and
#                                update the manifest; needs neither the toolchain nor numpy's
#                                and pandas' sources, only Debian's packages and python3.11
#
# It reuses the default Guest's build folder (SPINE_GUEST_WORK, default build/guest):
# run guest/build.sh first. Inputs, each pinned by sha256:
#   - numpy's source at tag v1.24.2 (commit 85f38ab180ece5290f64e8ddbd9cf06ad8fa4a5e) as
#     a tar archive, from SPINE_NUMPY_SOURCE or $SPINE_GUEST_WORK/src/numpy-1.24.2.tar,
#     made from a clone of numpy's public repository with
#       git archive --format=tar --prefix=numpy-1.24.2/ v1.24.2 >numpy-1.24.2.tar
#     (Debian's archive does not serve numpy's original tarball here), patched with
#     guest/data/numpy.patch;
#   - pandas' source at tag v1.5.3 (commit 2e218d10984e9919f0296931d92ea851c6a6faf5) of
#     pandas' public repository, as a zip of the tag's files under the folder
#     github.com/pandas-dev/pandas@v1.5.3/ (the zip the committed artifact was built from),
#     from SPINE_PANDAS_SOURCE or $SPINE_GUEST_WORK/src/pandas-v1.5.3.zip, which the builder
#     provides: the build fetches nothing of it (docs/packages.md says where it comes from);
#     patched with guest/data/pandas.patch;
#   - Debian's binary packages python3-sympy, python3-mpmath, python3-dateutil, python3-six,
#     python3-tz and python3-yaml (their .py files: PyYAML's pure-Python form, without its
#     _yaml C module, which it does without; pytz patched with guest/data/pytz.patch to
#     read the Guest's tzdata package);
#   - Debian's cython3 (0.29.32, the version pandas 1.5.3 asks for), python3-setuptools,
#     python3-numpy (pandas' setup.py imports it), libc++-19-dev-wasm32 and
#     libc++abi-19-dev-wasm32 on the build machine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${SPINE_GUEST_WORK:-$root/build/guest}
out=$here/artifact
check=0
python_only=0
case "${1:-}" in
--check) check=1 ;;
--python-only) python_only=1 ;;
"") ;;
*) printf '[data] unknown argument %s (want --check or --python-only)\n' "$1" >&2; exit 2 ;;
esac
if [ $python_only = 0 ]; then
	[ -d "$work" ] || { printf '[data] %s is missing: run guest/build.sh first\n' "$work" >&2; exit 1; }
	work=$(cd "$work" && pwd)
	[ $check = 0 ] || out=$work/data-check-artifact
fi

numpy_version=1.24.2
numpy_commit=85f38ab180ece5290f64e8ddbd9cf06ad8fa4a5e
numpy_tar=numpy-$numpy_version.tar
numpy_sha256=bb83c2ed7fadd7f12f94044d21c756436d341a39c10cbf08f53f70e0e5bea7b3
pandas_version=1.5.3
pandas_commit=2e218d10984e9919f0296931d92ea851c6a6faf5
pandas_date=2023-01-19T10:26:43+0700
pandas_prefix=github.com/pandas-dev/pandas@v$pandas_version
pandas_zip=pandas-v$pandas_version.zip
pandas_sha256=348c5609c0d8afdd6b686ad0040a8fc5484bf18de7064c3c7734458858f4f37a
debs=(
	python3-sympy=1.11.1-1=python3-sympy_1.11.1-1_all.deb=b437232be31819aafd267ddf2132c16293ef75e02fd58b4ad31eee3ef1d5b49e
	python3-mpmath=1.2.1-2=python3-mpmath_1.2.1-2_all.deb=2c219b63cbab11b27208ef4141c116cbb022dc1236e84981fadb46042f3ce235
	python3-dateutil=2.8.2-2=python3-dateutil_2.8.2-2_all.deb=59d696282ffeaf54395452e012715410dc414c6baaa54d4cdae56ac7c217eb31
	python3-six=1.16.0-4=python3-six_1.16.0-4_all.deb=fd189e9cecbcf17a1fc20aec30055c8afa9c1eec00cd6e7ab385087a2ab3b0d3
	python3-tz=2022.7.1-4=python3-tz_2022.7.1-4_all.deb=b165d30ef171f9426c496900449b85d290d4c6d2de50e1c3f4adc2b55b6fd534
	python3-yaml:amd64=6.0-3+b2=python3-yaml_6.0-3+b2_amd64.deb=8d0db0b3099298fe039b94e4c52a6987798a90d23b80de3ac13c3cb75cf622a2
)
llvm=/usr/lib/llvm-19/bin
python_build=/usr/bin/python3.11 # Debian's, where cython3 and setuptools are
export SOURCE_DATE_EPOCH=1675814400
export LC_ALL=C
log() { printf '[data] %s\n' "$*" >&2; }

# fetch_debs: Debian's packages of the pure-Python packages into $work/src, each checked.
fetch_debs() {
	for entry in "${debs[@]}"; do
		IFS='=' read -r pkg version file sum <<<"$entry"
		if [ ! -f "$work/src/$file" ]; then
			log "fetching $pkg $version"
			(cd "$work/src" && apt-get download "$pkg=$version" >/dev/null 2>&1 || true)
		fi
		echo "$sum  $work/src/$file" | sha256sum -c --quiet - 2>/dev/null ||
			{ log "$work/src/$file is missing or does not have the expected sha256 $sum"; exit 1; }
	done
}

# pure_python DIR: the pure-Python packages from Debian's, in DIR/pure (pytz patched).
pure_python() {
	local d=$1 entry pkg version file sum dist=usr/lib/python3/dist-packages
	rm -rf "$d/debs" && mkdir -p "$d/debs"
	for entry in "${debs[@]}"; do
		IFS='=' read -r pkg version file sum <<<"$entry"
		dpkg-deb -x "$work/src/$file" "$d/debs/${pkg%%:*}"
	done
	mkdir -p "$d/pure"
	rm -rf "$d/pure"/* && cp -a "$d/debs/python3-sympy/$dist/sympy" "$d/debs/python3-mpmath/$dist/mpmath" \
		"$d/debs/python3-dateutil/$dist/dateutil" "$d/debs/python3-tz/$dist/pytz" "$d/debs/python3-six/$dist/six.py" \
		"$d/debs/python3-yaml/$dist/yaml" "$d/pure/"
	# PyYAML's C module (_yaml, libyaml's binding) is the build machine's: left out, PyYAML
	# uses its pure-Python parser and emitter.
	rm -f "$d/pure/yaml"/*.so
	patch -s -p1 -d "$d/pure" <"$here/pytz.patch"
}

# licences OUT: the pure-Python packages' licences, as Debian's packages state them.
pure_licences() {
	cp "$d/debs/python3-sympy/usr/share/doc/python3-sympy/copyright" "$1/LICENSE.sympy"
	cp "$d/debs/python3-mpmath/usr/share/doc/python3-mpmath/copyright" "$1/LICENSE.mpmath"
	cp "$d/debs/python3-dateutil/usr/share/doc/python3-dateutil/copyright" "$1/LICENSE.dateutil"
	cp "$d/debs/python3-tz/usr/share/doc/python3-tz/copyright" "$1/LICENSE.pytz"
	cp "$d/debs/python3-six/usr/share/doc/python3-six/copyright" "$1/LICENSE.six"
	cp "$d/debs/python3-yaml/usr/share/doc/python3-yaml/copyright" "$1/LICENSE.yaml"
}

if [ $python_only = 1 ]; then
	python_build=/usr/bin/python3.11
	"$python_build" -c 'import sys; assert sys.version_info[:3] == (3, 11, 2), sys.version' ||
		{ log "$python_build must be exactly 3.11.2 (it compiles the modules)"; exit 1; }
	# What numpy's and pandas' entries and spine.wasm are made of must be what the
	# manifest records: those are taken as they are.
	"$python_build" -I - "$root" "$out/manifest.json" <<-'EOF' || exit 1
		import hashlib, json, pathlib, sys
		root, manifest = pathlib.Path(sys.argv[1]), json.loads(pathlib.Path(sys.argv[2]).read_text())
		pure = {"guest/data/build.sh", "guest/data/pytz.patch", "guest/data/python/_spine_builtins.py",
		        "guest/data/tools/mkpackages.py", "guest/data/tools/mkmanifest.py"}
		changed = [rel for rel, sha in manifest["sources"].items() if rel not in pure and
		           (not (root / rel).exists() or hashlib.sha256((root / rel).read_bytes()).hexdigest() != sha)]
		if changed:
		    sys.exit("[data] --python-only: these changed too, run guest/data/build.sh: " + ", ".join(changed))
	EOF
	work=${SPINE_DATA_PURE_WORK:-$root/build/data-pure}
	d=$work
	mkdir -p "$work/src"
	fetch_debs
	pure_python "$d"
	"$python_build" -I "$here/tools/mkpackages.py" --repack "$out/packages.zip" \
		--keep numpy/ --keep pandas/ --keep pytz/zoneinfo/ --out "$d/packages.zip" "$d/pure" "$here/python"
	cp "$d/packages.zip" "$out/packages.zip"
	pure_licences "$out"
	inputs=()
	for entry in "${debs[@]}"; do
		IFS='=' read -r pkg version file sum <<<"$entry"
		inputs+=(--input "${pkg%%:*}=$version=$work/src/$file")
	done
	"$python_build" -I "$here/tools/mkmanifest.py" --root "$root" --out "$out" --update "$out/manifest.json" \
		"${inputs[@]}" >"$d/manifest.json"
	mv "$d/manifest.json" "$out/manifest.json"
	log "repacked packages.zip: $(du -h "$out/packages.zip" | cut -f1)"
	exit 0
fi

cpython=$work/Python-3.11.2
bld=$cpython/builddir/wasi
sdk=$work/sdk
deps=$work/deps
[ -f "$bld/pyconfig.h" ] || { log "$bld/pyconfig.h is missing: run guest/build.sh first"; exit 1; }

need=()
[ -f /usr/lib/python3/dist-packages/Cython/__init__.py ] || need+=(cython3)
"$python_build" -c 'import setuptools' 2>/dev/null || need+=(python3-setuptools)
"$python_build" -c 'import numpy' 2>/dev/null || need+=(python3-numpy)
[ -d /usr/lib/wasm32-wasi/c++/v1 ] || [ -f /usr/lib/wasm32-wasi/libc++.a ] || need+=(libc++-19-dev-wasm32 libc++abi-19-dev-wasm32)
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

d=$work/data
mkdir -p "$d" "$work/src"
# 1. Inputs, checked.
src=${SPINE_NUMPY_SOURCE:-$work/src/$numpy_tar}
[ -f "$src" ] || { log "no numpy source at $src: set SPINE_NUMPY_SOURCE to the tar of commit $numpy_commit (see the head of this script)"; exit 1; }
echo "$numpy_sha256  $src" | sha256sum -c --quiet - 2>/dev/null ||
	{ log "$src does not have the expected sha256 $numpy_sha256"; exit 1; }
pdsrc=${SPINE_PANDAS_SOURCE:-$work/src/$pandas_zip}
[ -f "$pdsrc" ] || { log "no pandas source at $pdsrc: set SPINE_PANDAS_SOURCE to the zip of pandas' tag v$pandas_version (commit $pandas_commit; see the head of this script and docs/packages.md)"; exit 1; }
echo "$pandas_sha256  $pdsrc" | sha256sum -c --quiet - 2>/dev/null ||
	{ log "$pdsrc does not have the expected sha256 $pandas_sha256"; exit 1; }
fetch_debs

# 2. numpy's C modules, cross-built by its own setup.py for wasm32-wasi (its
# configuration probes run with the wasm compiler), each archived by fakeld instead of
# linked. Rebuilt when the recipe (source, patch, flags, tools) changes.
np=$d/numpy-$numpy_version
cflags="-O2 -DNPY_NO_SIGNAL -D__NPY_PRIVATE_NO_SIGNAL -Drestrict=__restrict -ffile-prefix-map=$work=/build -I$bld -I$cpython/Include"
recipe="numpy $numpy_sha256 $(sha256sum "$here/numpy.patch" "$here/tools/fakeld.py" | cut -d' ' -f1 | tr '\n' ' ') $cflags"
if [ "$(cat "$d/numpy.stamp" 2>/dev/null)" != "$recipe" ]; then
	log "extracting and patching numpy $numpy_version"
	rm -rf "$np" "$d/sysconf" "$d/np-out"
	tar -C "$d" -xf "$src"
	patch -s -p1 -d "$np" <"$here/numpy.patch"
	# The wasm build's sysconfig data (sizes of long, size_t, long double; the extension
	# suffix), generated outside CPython's build folder.
	mkdir -p "$d/sysconf"
	(cd "$d/sysconf" && _PYTHON_PROJECT_BASE=$bld _PYTHON_HOST_PLATFORM=wasi-wasm32 PYTHONPATH=$cpython/Lib \
		_PYTHON_SYSCONFIGDATA_NAME=_sysconfigdata__wasi_wasm32-wasi \
		"$python_build" -S -m sysconfig --generate-posix-vars >sysconfig.log 2>&1) ||
		{ tail -20 "$d/sysconf/sysconfig.log" >&2; exit 1; }
	log "cross-building numpy's C modules (several minutes)"
	(
		cd "$np"
		export CC="$sdk/bin/clang --sysroot=$sdk/share/wasi-sysroot"
		export CXX="$sdk/bin/clang++ --sysroot=$sdk/share/wasi-sysroot"
		export LDSHARED="$python_build $here/tools/fakeld.py"
		export LDCXXSHARED="$LDSHARED"
		export AR=$llvm/llvm-ar RANLIB=$llvm/llvm-ranlib
		export CFLAGS="$cflags" CXXFLAGS="$cflags" LDFLAGS=""
		export _PYTHON_SYSCONFIGDATA_NAME=_sysconfigdata__wasi_wasm32-wasi _PYTHON_HOST_PLATFORM=wasi-wasm32
		export PYTHONPATH=$(echo "$d"/sysconf/build/lib.*)
		export NPY_DISABLE_SVML=1 NPY_BLAS_ORDER= NPY_LAPACK_ORDER= BLAS=None LAPACK=None ATLAS=None
		"$python_build" setup.py build --disable-optimization -j 2 >"$d/numpy-build.log" 2>&1
	) || { tail -40 "$d/numpy-build.log" >&2; exit 1; }
	printf '%s' "$recipe" >"$d/numpy.stamp"
fi

# 3. pandas' Cython and C modules: Debian's Cython translates them, the Guest's compiler
# compiles them against numpy's wasm32 headers (tools/pdbuild.py), into one archive.
pd=$d/pandas-$pandas_version
npinc=$(echo "$np"/build/src.*/numpy/core/include)
pdflags="-O2 -DNPY_NO_SIGNAL -D__NPY_PRIVATE_NO_SIGNAL -Drestrict=__restrict -ffile-prefix-map=$work=/build -I$bld -I$cpython/Include"
recipe="pandas $pandas_sha256 $(cat "$d/numpy.stamp" | sha256sum | cut -d' ' -f1) $(sha256sum "$here/pandas.patch" "$here/tools/pdbuild.py" | cut -d' ' -f1 | tr '\n' ' ') $pdflags"
if [ "$(cat "$d/pandas.stamp" 2>/dev/null)" != "$recipe" ]; then
	log "extracting and patching pandas $pandas_version"
	rm -rf "$pd" "$d/pd-out"
	"$python_build" -I -c '
import sys, zipfile
prefix, dest = sys.argv[2] + "/", sys.argv[3] + "/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix):
            sys.exit(f"unexpected entry {info.filename}")
        info.filename = dest + info.filename[len(prefix):]
        z.extract(info, sys.argv[4])' "$pdsrc" "$pandas_prefix" "$(basename "$pd")" "$d"
	patch -s -p1 -d "$pd" <"$here/pandas.patch"
	log "cross-building pandas' C modules (ten minutes or more)"
	(
		cd "$d"
		export CC="$sdk/bin/clang --sysroot=$sdk/share/wasi-sysroot"
		export CXX="$sdk/bin/clang++ --sysroot=$sdk/share/wasi-sysroot"
		export CFLAGS="$pdflags"
		"$python_build" -I "$here/tools/pdbuild.py" --src "$pd" --out "$d/pd-out" \
			--numpy-include "$npinc/numpy" --numpy-include "$npinc" --numpy-include "$np/numpy/core/include" \
			--version-json "{\"date\": \"$pandas_date\", \"dirty\": false, \"error\": null, \"full-revisionid\": \"$pandas_commit\", \"version\": \"$pandas_version\"}" \
			-j 2 >"$d/pandas-build.log" 2>&1
	) || { tail -40 "$d/pandas-build.log" >&2; exit 1; }
	printf '%s' "$recipe" >"$d/pandas.stamp"
fi

log "collecting numpy's and pandas' modules"
"$python_build" -I "$here/tools/collect.py" "$(echo "$np"/build/lib.*)" "$d/np-out" "$d/pd-out" >"$d/modules.txt"
# numpy's generated __config__.py names the build folder: the Guest's is /build.
sed -i "s#$work#/build#g" "$d/np-out/py/numpy/__config__.py"
cc="$sdk/bin/clang --sysroot=$sdk/share/wasi-sysroot"
$cc -O2 -c -I"$cpython/Include" -I"$bld" -o "$d/np-out/inittab.o" "$d/np-out/inittab.c"
# A name pandas defines that numpy, CPython or libc define too would fail the link, or,
# when the other definition is never pulled in, bind their calls to pandas' code.
globals() { for a in "$@"; do "$llvm/llvm-nm" --defined-only --extern-only -j "$a" 2>/dev/null; done | grep -v -e ':$' -e '^$' | sort -u; }
clash=$(comm -12 <(globals "$d/pd-out/libpandas.a") <(globals $(grep -v '^-' "$d/np-out/link.args") \
	"$np"/build/temp.*/*.a "$bld/libpython3.11.a" "$deps"/lib/*.a /usr/lib/wasm32-wasi/libc.a /usr/lib/wasm32-wasi/libm.a))
[ -z "$clash" ] || { log "pandas defines names others define too (rename them in tools/pdbuild.py): $(echo $clash)"; exit 1; }

# 4. The reactor, linked as guest/build.sh links the default Guest's, with numpy's
# and pandas' archives and their inittab object before libpython.
[ -f "$bld/libpython3.11.a" ] || { log "$bld/libpython3.11.a is missing: run guest/build.sh first"; exit 1; }
log "linking spine.wasm"
$cc -O2 -c -I"$cpython/Include" -I"$bld" -o "$d/spine.o" "$root/guest/c/spine.c"
$cc -O2 -c -o "$d/cxa_abort.o" "$here/c/cxa_abort.c"
mapfile -t np_link < <(cat "$d/pd-out/link.args" "$d/np-out/link.args")
$cc -mexec-model=reactor -z stack-size=8388608 -Wl,--stack-first \
	-Wl,--initial-memory=33554432 -Wl,--max-memory=536870912 \
	-o "$d/spine.wasm" "$d/spine.o" "$d/np-out/inittab.o" "${np_link[@]}" "$d/cxa_abort.o" "$bld/libpython3.11.a" \
	"$bld/Modules/_decimal/libmpdec/libmpdec.a" "$bld/Modules/expat/libexpat.a" \
	"$deps/lib/libz.a" "$deps/lib/libbz2.a" "$deps/lib/liblzma.a" "$deps/lib/libsqlite3.a" \
	-lwasi-emulated-signal -lwasi-emulated-getpid -lwasi-emulated-process-clocks -lm 2>"$d/link.log" ||
	{ cat "$d/link.log" >&2; exit 1; }
# A signature mismatch between two definitions of a name makes wasm-ld trap the
# calls: that must never pass.
if grep -q "signature mismatch" "$d/link.log"; then
	cat "$d/link.log" >&2
	log "the link found a function signature mismatch"
	exit 1
fi
mkdir -p "$out"
"$llvm/llvm-strip" -o "$out/spine.wasm" "$d/spine.wasm"

# 5. The packages' Python: numpy and pandas as built, the others from Debian's packages, and
# the finder of the dotted built-in modules (python/_spine_builtins.py).
log "packing packages.zip"
pure_python "$d"
# pytz reads the zone files' first (32-bit) part and no TZ footer: the default Guest's
# "slim" files have neither, so pytz gets its own zone folder, compiled "fat" by zic
# from the default Guest's tzdata, with the tables it reads.
tzsrc=$deps/tzdata/usr/share/zoneinfo
rm -rf "$d/pytzdata" && mkdir -p "$d/pytzdata/pytz/zoneinfo"
/usr/sbin/zic -b fat -d "$d/pytzdata/pytz/zoneinfo" "$tzsrc/tzdata.zi"
cp "$tzsrc/tzdata.zi" "$tzsrc/zone1970.tab" "$tzsrc/zone.tab" "$tzsrc/iso3166.tab" "$d/pytzdata/pytz/zoneinfo/"
"$python_build" -I "$here/tools/mkpackages.py" --out "$out/packages.zip" --data "$d/pytzdata" \
	"$d/np-out/py" "$d/pd-out/py" "$d/pure" "$here/python"

# 6. Licences and the manifest.
cp "$np/LICENSE.txt" "$out/LICENSE.numpy"
cp "$np/LICENSES_bundled.txt" "$out/LICENSES_bundled.numpy"
pure_licences "$out"
cp "$pd/LICENSE" "$out/LICENSE.pandas"
"$python_build" -I -c 'import pathlib, sys
d = pathlib.Path(sys.argv[1])
sys.stdout.write("".join(f"== {p.name} ==\n\n{p.read_text()}\n" for p in sorted(d.iterdir())))' "$pd/LICENSES" >"$out/LICENSES_bundled.pandas"
cp "$d/modules.txt" "$out/modules.txt"
inputs=(--input "numpy=$numpy_version=$src" --input "pandas=$pandas_version=$pdsrc")
for entry in "${debs[@]}"; do
	IFS='=' read -r pkg version file sum <<<"$entry"
	inputs+=(--input "${pkg%%:*}=$version=$work/src/$file")
done
rm -f "$out/manifest.json"
"$python_build" -I "$here/tools/mkmanifest.py" --root "$root" --out "$out" "${inputs[@]}" >"$d/manifest.json"
mv "$d/manifest.json" "$out/manifest.json"

if [ $check = 1 ]; then
	status=0
	for f in "$out"/*; do
		f=$(basename "$f")
		if cmp -s "$out/$f" "$here/artifact/$f"; then log "same: $f"; else log "DIFFERS: $f"; status=1; fi
	done
	exit $status
fi
log "done: $(du -h "$out/spine.wasm" | cut -f1) spine.wasm, $(du -h "$out/packages.zip" | cut -f1) packages.zip"
