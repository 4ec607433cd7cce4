"""pdbuild.py --src PANDAS --out OUT --numpy-include DIR... [-j N]: cross-builds pandas'
C and Cython extension modules for the data Guest.

pandas' setup.py describes its extensions (their .pyx, C helpers, include folders and
macros); this imports it for that list only (its setup() does not run on import), has
Debian's Cython render the templates and translate the .pyx files, then compiles every
source once with the Guest's compiler ($CC, $CXX and $CFLAGS, numpy's wasm32 headers
before the build machine's) and archives the objects in OUT/libpandas.a. A C helper that
setup.py compiles into several modules (np_datetime.c, tokenizer.c) is compiled once:
in one static program, one copy of each name. The functions pandas' headers define
(not static) in every module that includes them get each module's own name, as they
are each module's own in shared objects. Writes OUT/modules.txt (the dotted names
of the built-in modules), OUT/link.args (what the Guest's link adds) and OUT/py/pandas
(pandas' Python files)."""

import argparse
import concurrent.futures
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

AR = "/usr/lib/llvm-19/bin/llvm-ar"
# Defined (not static) by headers every Cython module includes: khash_python.h's
# allocators and tslibs/util.pxd's char_to_string. Identical copies, but statically
# linked two definitions of a name are an error: each module renames its own.
HEADER_GLOBALS = ["char_to_string", "traced_calloc", "traced_free", "traced_malloc", "traced_realloc"]
# pandas' np_datetime*.c are changed copies of numpy's datetime code, under numpy's
# names (and other signatures): in one program with numpy's they take pandas_ names.
NUMPY_NAMES = ["add_minutes_to_datetimestruct", "add_seconds_to_datetimestruct",
               "convert_pydatetime_to_datetimestruct", "get_datetime_iso_8601_strlen",
               "get_datetime_metadata_from_dtype", "get_datetimestruct_days", "is_leapyear",
               "make_iso_8601_datetime", "parse_iso_8601_datetime"]
VERSION_PY = """import json

version_json = '''
{}
'''  # END VERSION_JSON


def get_versions():
    return json.loads(version_json)
"""


def load_setup(src):
    """pandas' setup.py as a module: its extension list, templates and directives."""
    os.chdir(src)
    sys.path.insert(0, str(src))
    sys.argv = ["setup.py", "build_ext"]
    import setup  # noqa: E402 (pandas' setup.py, from src)

    return setup


def compile_jobs(setup, exts, numpy_include):
    """One compile per source: (source, object, language, include folders, macros)."""
    native = setup.numpy.get_include()
    jobs = {}
    for ext in exts:
        includes = [d for d in ext.include_dirs if d != native]
        macros = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in ext.define_macros]
        macros += [f"-U{m}" for m in ext.undef_macros]
        extra = [a for a in ext.extra_compile_args]
        own = ext.name.replace(".", "_")
        renames = [f"-D{n}={n}__{own}" for n in HEADER_GLOBALS]
        for i, source in enumerate(ext.sources):
            if source in jobs:
                # A helper shared by modules: compiled once, seeing every module's folders.
                for d in includes:
                    if d not in jobs[source][3]:
                        jobs[source][3].append(d)
                continue
            lang = "c++" if source.endswith(".cpp") else "c"
            jobs[source] = (source, "obj/" + source[:-len(pathlib.Path(source).suffix)] + ".o",
                            lang, list(includes), macros + extra + (renames if i == 0 else []))
    return [jobs[k] for k in sorted(jobs)]


def run(job, out, numpy_include):
    source, obj, lang, includes, flags = job
    cc = os.environ["CXX" if lang == "c++" else "CC"]
    obj = out / obj
    obj.parent.mkdir(parents=True, exist_ok=True)
    cmd = shlex.split(cc) + shlex.split(os.environ.get("CFLAGS", ""))
    cmd += [f"-I{d}" for d in numpy_include] + [f"-I{d}" for d in includes] + flags
    cmd += [f"-D{n}=pandas_{n}" for n in NUMPY_NAMES]
    cmd += ["-c", source, "-o", str(obj)]
    # Within one build folder, an object made by the same command from an older
    # source is kept (build.sh starts from a new folder when its recipe changes).
    record = obj.with_suffix(".cmd")
    if obj.exists() and record.exists() and record.read_text() == " ".join(cmd) \
            and obj.stat().st_mtime >= pathlib.Path(source).stat().st_mtime:
        return obj
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"pdbuild: {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    record.write_text(" ".join(cmd))
    return obj


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--numpy-include", action="append", default=[])
    parser.add_argument("--version-json", required=True,
                        help="what pandas/_version.py reports (versioneer writes it in a build)")
    parser.add_argument("-j", type=int, default=2)
    args = parser.parse_args()
    out = args.out.resolve()
    src = args.src.resolve()
    setup = load_setup(src)
    setup.build_ext.render_templates(setup._pxifiles)
    from Cython.Build import cythonize

    exts = cythonize(setup.extensions, compiler_directives=setup.directives,
                     nthreads=args.j, quiet=True)
    names = [e.name.rsplit(".", 1)[-1] for e in exts]
    if len(set(names)) != len(names):
        sys.exit(f"pdbuild: two modules share a PyInit name: {sorted(names)}")
    jobs = compile_jobs(setup, exts, args.numpy_include)
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        objs = list(pool.map(lambda j: run(j, out, args.numpy_include), jobs))
    lib = out / "libpandas.a"
    lib.unlink(missing_ok=True)
    subprocess.check_call([AR, "rcsD", str(lib)] + [str(o) for o in objs])
    (out / "modules.txt").write_text("".join(e.name + "\n" for e in sorted(exts, key=lambda e: e.name)))
    cxx = any(j[2] == "c++" for j in jobs)
    (out / "link.args").write_text(str(lib) + "\n" + ("-lc++\n-lc++abi\n" if cxx else ""))
    py = out / "py"
    shutil.rmtree(py, ignore_errors=True)
    shutil.copytree(src / "pandas", py / "pandas", ignore=lambda d, names: [
        n for n in names if not (n.endswith(".py") or (pathlib.Path(d) / n).is_dir())])
    # The source's _version.py asks git; a build's is this, as versioneer writes it.
    (py / "pandas" / "_version.py").write_text(VERSION_PY.format(args.version_json))


if __name__ == "__main__":
    main()
