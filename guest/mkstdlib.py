"""Pack the standard library and the Guest's Python (guest/python: the module bootstrap
and the package plm) into one stored zip.

Every module is compiled to an unchecked hash-based .pyc (no timestamps, no
source needed at run time) and stored uncompressed, because the Guest has no
zlib and zipimport reads stored entries directly. Entries are sorted and dated
1980-01-01, and the build's sysconfig data names the build folder as /build, so
the same inputs give the same bytes wherever they are built.
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
    "msilib", "multiprocessing", "pydoc_data", "site-packages", "sqlite3", "test",
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", required=True, type=pathlib.Path)
    parser.add_argument("--build", required=True, type=pathlib.Path)
    parser.add_argument("--guest", required=True, type=pathlib.Path)
    parser.add_argument("--work", required=True, type=pathlib.Path, help="the build folder (absolute)")
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

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for rel in sorted(entries):
            source = entries[rel].read_bytes()
            if rel in sysconfig_files:
                source = sysconfig_data(source, args.work)
            data = pyc(source, rel)
            info = zipfile.ZipInfo(rel[:-3] + ".pyc", DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o444 << 16
            zf.writestr(info, data)
    args.out.write_bytes(buf.getvalue())
    print(f"{len(entries)} modules, {len(buf.getvalue())} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
