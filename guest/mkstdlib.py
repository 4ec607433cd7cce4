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
import json
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


def guest_sources(guest):
    """The Guest's own modules (guest/python) by their place in the zip's tree."""
    return {path.relative_to(guest).as_posix(): path.read_bytes() for path in guest.rglob("*.py")}


def write_zip(out, files):
    """Write files (name -> bytes) as the stored, sorted, dated zip the Guest mounts."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o444 << 16
            zf.writestr(info, files[name])
    out.write_bytes(buf.getvalue())
    return len(buf.getvalue())


def repack(args):
    """The zip args.repack holds with the Guest's own modules compiled anew from
    args.guest: those the manifest args.old_manifest lists (guest/python/...) are taken
    out, the ones there now put in. The rest (the standard library, the build's sysconfig
    data, the time-zone database) is the build's and stays byte for byte, so the zip is
    the one a whole build from the same sources makes (guest/build.sh --python-only)."""
    old = json.loads(args.old_manifest.read_text())["sources"]
    prefix = "guest/python/"
    dropped = {rel[len(prefix):-3] + ".pyc" for rel in old if rel.startswith(prefix) and rel.endswith(".py")}
    files = {}
    with zipfile.ZipFile(args.repack) as zf:
        for info in zf.infolist():
            if info.filename not in dropped:
                files[info.filename] = zf.read(info)
    sources = guest_sources(args.guest)
    for rel, source in sources.items():
        files[rel[:-3] + ".pyc"] = pyc(source, rel)
    size = write_zip(args.out, files)
    print(f"{len(sources)} Guest modules repacked, {size} bytes", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", type=pathlib.Path)
    parser.add_argument("--build", type=pathlib.Path)
    parser.add_argument("--guest", required=True, type=pathlib.Path)
    parser.add_argument("--work", type=pathlib.Path, help="the build folder (absolute)")
    parser.add_argument("--tzdata", type=pathlib.Path, help="zic's output folder")
    parser.add_argument("--tzversion", help="the time-zone database's version")
    parser.add_argument("--repack", type=pathlib.Path,
                        help="a zip this made: compile only the Guest's own modules anew (with --old-manifest)")
    parser.add_argument("--old-manifest", type=pathlib.Path, help="the manifest of the zip --repack names")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    if args.repack:
        if not args.old_manifest:
            parser.error("--repack needs --old-manifest")
        repack(args)
        return
    for flag in ("lib", "build", "work", "tzdata", "tzversion"):
        if getattr(args, flag) is None:
            parser.error(f"--{flag} is required")

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
    sources = {rel: entries[rel].read_bytes() for rel in entries}
    sources.update(guest_sources(args.guest))
    tz_sources, data_files = tzdata(args.tzdata, args.tzversion)
    clash = set(tz_sources) & set(sources)
    if clash:
        sys.exit(f"mkstdlib: the time-zone database would replace {sorted(clash)}")
    sources.update(tz_sources)

    files = dict(data_files)
    for rel, source in sources.items():
        if rel in sysconfig_files:
            source = sysconfig_data(source, args.work)
        files[rel[:-3] + ".pyc"] = pyc(source, rel)
    size = write_zip(args.out, files)
    print(f"{len(sources)} modules, {len(data_files)} data files, {size} bytes",
          file=sys.stderr)


if __name__ == "__main__":
    main()
