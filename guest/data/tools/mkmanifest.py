"""Print the data Guest's manifest: the hash of every input and output.

The data module's tests recompute the hashes of its sources (this folder's build files
and the default Guest's spine.c, which the data Guest is linked from) and fail when
they no longer match: someone changed them without rebuilding."""

import argparse
import hashlib
import json
import pathlib

# Sources, relative to the repository root. Keep in step with data_test.go.
SOURCES = [
    "guest/c/spine.c",
    "guest/data/build.sh",
    "guest/data/c/cxa_abort.c",
    "guest/data/numpy.patch",
    "guest/data/pandas.patch",
    "guest/data/pytz.patch",
    "guest/data/python/_spine_builtins.py",
    "guest/data/tools/collect.py",
    "guest/data/tools/fakeld.py",
    "guest/data/tools/mkmanifest.py",
    "guest/data/tools/mkpackages.py",
    "guest/data/tools/pdbuild.py",
]


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True, type=pathlib.Path)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VERSION=PATH")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--update", type=pathlib.Path,
                        help="a manifest whose inputs this keeps where --input gives none anew "
                             "(numpy's and pandas' sources, for guest/data/build.sh --python-only)")
    args = parser.parse_args()
    inputs = json.loads(args.update.read_text())["inputs"] if args.update else {}
    for spec in args.input:
        name, version, path = spec.split("=", 2)
        inputs[name] = {"version": version, "file": pathlib.Path(path).name, "sha256": sha256(path)}
    manifest = {
        "abi_version": 1,
        "inputs": inputs,
        "sources": {rel: sha256(args.root / rel) for rel in SOURCES},
        "artifact": {p.name: sha256(p) for p in sorted(args.out.iterdir())
                     if p.is_file() and p.name != "manifest.json"},
    }
    print(json.dumps(manifest, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
