"""Print the Guest artifact's manifest: the hash of every input and output.

The Go test in package guest recomputes the hashes of the Guest sources and fails
when they no longer match (someone changed guest/ without rebuilding).
"""

import argparse
import hashlib
import json
import pathlib
import re
import subprocess

# Guest sources, relative to the repository root, besides guest/python/**/*.py and
# guest/cpython/*.patch (the Guest's patches to CPython).
# Keep in step with TestSourcesMatchManifest (guest_test.go).
SOURCES = [
    "guest/build.sh",
    "guest/mkstdlib.py",
    "guest/mkmanifest.py",
    "guest/Setup.local",
    "guest/c/spine.c",
    "guest/c/sqlite_vfs.c",
]


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def package(name):
    return version(["dpkg-query", "-W", "-f=${Version}", name])


def abi_version(root):
    """The ABI version the Guest's C side exports (SPINE_ABI_VERSION)."""
    source = (root / "guest/c/spine.c").read_text()
    return int(re.search(r"^#define SPINE_ABI_VERSION (\d+)$", source, re.M).group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True, type=pathlib.Path)
    parser.add_argument("--tarball", type=pathlib.Path)
    parser.add_argument("--update", type=pathlib.Path,
                        help="a manifest to keep the CPython, package and toolchain entries of: only the "
                             "sources' and the artifact's hashes are taken anew (guest/build.sh --python-only)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VERSION=PATH",
                        help="a file of a Debian package the build used (repeated)")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("licences", nargs="*", help="the licence files beside the artifact")
    args = parser.parse_args()
    if not args.update and not args.tarball:
        parser.error("--tarball or --update is required")
    packages = {}
    for spec in args.input:
        name, version, path = spec.split("=", 2)
        entry = packages.setdefault(name, {"version": version, "files": {}})
        if entry["version"] != version:
            parser.error(f"{name} is given as {entry['version']} and {version}")
        path = pathlib.Path(path)
        entry["files"][path.name] = sha256(path)
    sources = sorted(SOURCES + [p.relative_to(args.root).as_posix()
                                for p in [*(args.root / "guest/python").rglob("*.py"),
                                          *(args.root / "guest/cpython").glob("*.patch")]])
    artifact = {name: sha256(args.out / name) for name in ["spine.wasm", "python311.zip", *args.licences]}
    if args.update:
        manifest = json.loads(args.update.read_text())
        manifest["abi_version"] = abi_version(args.root)
        manifest["artifact"].update(artifact)
    else:
        manifest = {
            "abi_version": abi_version(args.root),
            "cpython": {"version": "3.11.2", "tarball": args.tarball.name, "sha256": sha256(args.tarball)},
            "packages": packages,
            "toolchain": {name: package(name) for name in
                          ["clang-19", "lld-19", "wasi-libc", "libclang-rt-19-dev-wasm32", "python3.11",
                           "tcl8.6", "libc-bin", "dpkg-dev"]},
            "artifact": artifact,
        }
    manifest["sources"] = {rel: sha256(args.root / rel) for rel in sources}
    print(json.dumps(manifest, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
