"""Pack the standard library, the Guest's Python (guest/python: the module bootstrap
and the package plm) and the IANA time-zone database into one stored zip.

Every module is compiled to an unchecked hash-based .pyc (no timestamps, no
source needed at run time) and stored uncompressed: zipimport reads a stored
entry directly, where a deflated one would cost an inflate on every import.
Entries are sorted and dated 1980-01-01, and the build's sysconfig data names
the build folder as /build, so the same inputs give the same bytes wherever
they are built.

The time-zone database (zic's output, given as --tzdata) becomes the package
tzdata, laid out as the tzdata distribution lays it out, which zoneinfo falls
back to when no folder on its TZPATH has the zone: tzdata/zoneinfo/<key> holds
each compiled zone, every folder under tzdata is a package (an empty
__init__), and tzdata/zones lists every key, for zoneinfo.available_timezones().
"""

import argparse
import importlib.util
import io
import marshal
import os
import pathlib
import pprint
import sys
import zipfile

# What the sandbox cannot use or a program has no business importing.
OMIT_DIRS = {
    "__phello__", "ctypes", "curses", "distutils", "ensurepip", "idlelib", "lib2to3",
    "msilib", "multiprocessing", "pydoc_data", "site-packages", "test",
    "tests", "idle_test", "tkinter", "turtledemo", "venv", "wsgiref", "xmlrpc",
}
OMIT_FILES = {
    # need threads, processes, a terminal, a display or the network
    "concurrent/futures/process.py", "dbm/gnu.py",
    "dbm/ndbm.py", "ftplib.py", "getpass.py", "http/server.py", "imaplib.py",
    "nntplib.py", "poplib.py", "pty.py", "smtpd.py", "smtplib.py", "socketserver.py",
    "telnetlib.py", "tty.py", "turtle.py", "urllib/robotparser.py",
    "webbrowser.py", "antigravity.py", "this.py",
    # the Guest's own, from guest/python, takes its place
    "concurrent/futures/thread.py",
    # other platforms, build helpers, pure-Python twins of built-in C modules
    "_aix_support.py", "_bootsubprocess.py", "_osx_support.py", "_pydecimal.py",
    "_pyio.py", "compileall.py", "py_compile.py",
}
MOUNT = "/usr/local/lib/python311.zip"
BUILD_FOLDER = "/build"  # the build folder as the Guest's sysconfig data names it
DATE = (1980, 1, 1, 0, 0, 0)


def wanted(rel):
    parts = rel.split("/")
    if any(p in OMIT_DIRS for p in parts[:-1]):
        return False
    return rel not in OMIT_FILES and not parts[-1].startswith("test_")


def pyc(source, rel):
    code = compile(source, f"{MOUNT}/{rel}", "exec", dont_inherit=True, optimize=0)
    data = bytearray(importlib.util.MAGIC_NUMBER)
    data += (1).to_bytes(4, "little")  # hash-based, unchecked
    data += importlib.util.source_hash(source)
    data += marshal.dumps(code)
    return bytes(data)


def sysconfig_data(source, work):
    """The build's sysconfig data with the build folder named BUILD_FOLDER, written out as
    sysconfig writes it (pprint), so its lines do not depend on the real folder's length."""
    namespace = {}
    exec(compile(source, "_sysconfigdata", "exec", dont_inherit=True), namespace)
    prefix = os.fspath(work) + "/"
    data = {k: v.replace(prefix, BUILD_FOLDER + "/") if isinstance(v, str) else v
            for k, v in namespace["build_time_vars"].items()}
    text = "# system configuration generated and used by the sysconfig module\n"
    text += "build_time_vars = " + pprint.pformat(data) + "\n"
    return text.encode("utf-8")


def tzdata(folder, version):
    """The package tzdata from zic's output folder: the sources of its (empty) modules
    and its data files, each by its name in the zip."""
    zones = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    if "Europe/Paris" not in zones or "UTC" not in zones:
        sys.exit(f"mkstdlib: {folder} does not look like zic's output")
    for key in zones:
        # zoneinfo turns a key into a package name: every folder must be an identifier.
        if not all(part.isidentifier() for part in key.split("/")[:-1]):
            sys.exit(f"mkstdlib: the zone {key} has a folder that cannot be a package")
    sources = {"tzdata/__init__.py": f'__version__ = "{version}"\n'.encode(),
               "tzdata/zoneinfo/__init__.py": b""}
    data = {"tzdata/zones": "".join(key + "\n" for key in zones).encode()}
    for key in zones:
        parts = key.split("/")
        for i in range(1, len(parts)):
            sources["tzdata/zoneinfo/" + "/".join(parts[:i]) + "/__init__.py"] = b""
        data["tzdata/zoneinfo/" + key] = (folder / key).read_bytes()
    return sources, data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", required=True, type=pathlib.Path)
    parser.add_argument("--build", required=True, type=pathlib.Path)
    parser.add_argument("--guest", required=True, type=pathlib.Path)
    parser.add_argument("--work", required=True, type=pathlib.Path, help="the build folder (absolute)")
    parser.add_argument("--tzdata", required=True, type=pathlib.Path, help="zic's output folder")
    parser.add_argument("--tzversion", required=True, help="the time-zone database's version")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()

    entries = {}
    for path in args.lib.rglob("*.py"):
        rel = path.relative_to(args.lib).as_posix()
        if wanted(rel):
            entries[rel] = path
    builddirs = list((args.build / "build").glob("lib.wasi-wasm32-*"))
    sysconfig_files = set()
    for path in builddirs[0].glob("_sysconfigdata_*.py"):
        entries[path.name] = path
        sysconfig_files.add(path.name)
    for path in args.guest.rglob("*.py"):
        entries[path.relative_to(args.guest).as_posix()] = path
    sources = {rel: entries[rel].read_bytes() for rel in entries}
    tz_sources, data_files = tzdata(args.tzdata, args.tzversion)
    clash = set(tz_sources) & set(sources)
    if clash:
        sys.exit(f"mkstdlib: the time-zone database would replace {sorted(clash)}")
    sources.update(tz_sources)

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        files = {rel[:-3] + ".pyc": rel for rel in sources}
        files.update({rel: None for rel in data_files})
        for name in sorted(files):
            rel = files[name]
            if rel is None:
                data = data_files[name]
            else:
                source = sources[rel]
                if rel in sysconfig_files:
                    source = sysconfig_data(source, args.work)
                data = pyc(source, rel)
            info = zipfile.ZipInfo(name, DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o444 << 16
            zf.writestr(info, data)
    args.out.write_bytes(buf.getvalue())
    print(f"{len(sources)} modules, {len(data_files)} data files, {len(buf.getvalue())} bytes",
          file=sys.stderr)


if __name__ == "__main__":
    main()
