"""mkpackages.py --out ZIP [--data FOLDER]... FOLDER...: packs the packages under each
FOLDER (numpy and pandas as built, the others from Debian's packages) into the data
Guest's package archive, and every file under each --data FOLDER as it is (pytz's zone
files), for importlib.resources.

With --repack OLD --keep PREFIX..., the entries of the archive OLD under each PREFIX
(numpy/ and pandas/ as built, pytz's zone files) are taken as they are instead, and only
the FOLDERs are compiled: the archive a whole build makes from the same sources, without
building numpy and pandas (guest/data/build.sh --python-only).

Every module is compiled to an unchecked hash-based .pyc (the Guest never needs the
source) named as the Guest sees it, under /usr/local/lib/data.zip. Test folders (and conftest.py files) and
what cannot run in the Guest (numpy.distutils, numpy.f2py: they build native code) are
left out. Entries are sorted, dated 1980-01-01 and deflated at level 9 (the archive is
committed: small matters more than the inflate an import costs, and the data Guest's
image imports its packages once), so the same inputs give the same bytes."""

import argparse
import importlib.util
import marshal
import pathlib
import sys
import zipfile

MOUNT = "/usr/local/lib/data.zip"
DATE = (1980, 1, 1, 0, 0, 0)
OMIT_DIRS = {"tests", "benchmarks", "__pycache__"}
OMIT_TOP = {"numpy/distutils", "numpy/f2py", "numpy/_pyinstaller"}
OMIT_NAMES = {"conftest.py"}  # pytest's, for the test suites only


def wanted(rel):
    parts = rel.split("/")
    if any(p in OMIT_DIRS for p in parts[:-1]) or parts[-1] in OMIT_NAMES:
        return False
    return not any(rel.startswith(top + "/") for top in OMIT_TOP)


def pyc(source, rel):
    code = compile(source, f"{MOUNT}/{rel}", "exec", dont_inherit=True, optimize=0)
    data = bytearray(importlib.util.MAGIC_NUMBER)
    data += (1).to_bytes(4, "little")  # hash-based, unchecked
    data += importlib.util.source_hash(source)
    data += marshal.dumps(code)
    return bytes(data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--data", action="append", default=[], type=pathlib.Path)
    parser.add_argument("--repack", type=pathlib.Path, help="an archive this made, to take entries of")
    parser.add_argument("--keep", action="append", default=[], help="with --repack: a prefix of the entries taken")
    parser.add_argument("folders", nargs="+", type=pathlib.Path)
    args = parser.parse_args()
    if bool(args.repack) != bool(args.keep):
        parser.error("--repack and --keep go together")
    kept = {}
    if args.repack:
        with zipfile.ZipFile(args.repack) as zf:
            for info in zf.infolist():
                if any(info.filename.startswith(prefix) for prefix in args.keep):
                    kept[info.filename] = zf.read(info)
    files = {}
    for folder in args.folders:
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).as_posix()
            if wanted(rel):
                if rel in files:
                    sys.exit(f"mkpackages: {rel} is in two folders")
                files[rel] = path
    entries = {rel[:-3] + ".pyc": (files[rel], True) for rel in files}
    for folder in args.data:
        for path in folder.rglob("*"):
            if path.is_file():
                entries[path.relative_to(folder).as_posix()] = (path, False)
    clash = set(kept) & set(entries)
    if clash:
        sys.exit(f"mkpackages: the folders hold what --keep keeps: {sorted(clash)[:5]}")
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name in sorted([*entries, *kept]):
            info = zipfile.ZipInfo(name, DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            if name in kept:
                zf.writestr(info, kept[name])
                continue
            path, source = entries[name]
            zf.writestr(info, pyc(path.read_bytes(), name[:-4] + ".py") if source else path.read_bytes())


if __name__ == "__main__":
    main()
