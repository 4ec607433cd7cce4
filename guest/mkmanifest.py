"""Print the Guest artifact's manifest: the hash of every input and output.

The Go test in package guest recomputes the hashes of the Guest sources and fails
when they no longer match (someone changed guest/ without rebuilding).
"""

import argparse
import hashlib
import json
import pathlib
import subprocess

# Guest sources, relative to the repository root, besides guest/python/**/*.py.
# Keep in step with TestSourcesMatchManifest (guest_test.go).
SOURCES = [
    "guest/build.sh",
    "guest/mkstdlib.py",
    "guest/mkmanifest.py",
    "guest/Setup.local",
    "guest/c/spine.c",
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True, type=pathlib.Path)
    parser.add_argument("--tarball", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    sources = sorted(SOURCES + [p.relative_to(args.root).as_posix()
                                for p in (args.root / "guest/python").rglob("*.py")])
    manifest = {
        "abi_version": 1,
        "cpython": {"version": "3.11.2", "tarball": args.tarball.name, "sha256": sha256(args.tarball)},
        "toolchain": {name: package(name) for name in
                      ["clang-19", "lld-19", "wasi-libc", "libclang-rt-19-dev-wasm32", "python3.11"]},
        "sources": {rel: sha256(args.root / rel) for rel in sources},
        "artifact": {name: sha256(args.out / name)
                     for name in ["spine.wasm", "python311.zip", "LICENSE.python"]},
    }
    print(json.dumps(manifest, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
