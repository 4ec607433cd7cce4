"""Stands in for LDSHARED in numpy's cross build: instead of linking a shared extension
module (the Guest cannot load one), archives its objects into OUT (an ar archive despite
the .so name) and records the libraries the link would have used in OUT.libs, for the
Guest's one static link."""

import os
import subprocess
import sys

AR = "/usr/lib/llvm-19/bin/llvm-ar"


def main(args):
    out, objs, libs = None, [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-o":
            out = args[i + 1]
            i += 2
            continue
        if a.endswith(".o"):
            objs.append(os.path.abspath(a))
        elif a.endswith(".a"):
            libs.append(os.path.abspath(a))
        elif a.startswith("-L") and len(a) > 2:
            libs.append("-L" + os.path.abspath(a[2:]))
        elif a.startswith("-l"):
            libs.append(a)
        i += 1
    if out is None:
        sys.exit(f"fakeld: no -o in {args}")
    if os.path.exists(out):
        os.remove(out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    # D: no timestamps or owners in the archive, so the same objects give the same bytes.
    subprocess.check_call([AR, "rcsD", out] + objs)
    with open(out + ".libs", "w") as f:
        f.write("\n".join(libs) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
