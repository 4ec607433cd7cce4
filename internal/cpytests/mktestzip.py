"""Write the Guest's standard library archive plus CPython's test package.

The archive is the committed guest/artifact/python311.zip, entry for entry, followed by
the few modules test.support needs that the Guest omits (SUPPORT_NEEDS), and the test
package of CPython's source (Lib/test): every .py compiled the way
guest/mkstdlib.py compiles the standard library (its pyc function), the few that do not compile on purpose (bad_coding.py, badsyntax_*.py) and every other
file (test data: decimaltestdata, math_testcases.txt, ...) stored as it is.

    python3.11 -I mktestzip.py --guest guest --lib <CPython>/Lib --out tests.zip \
        [--only test_string --only test_asyncio.test_futures ...]

--only keeps, of the test package, its own files (test/*.py that are not test modules,
test/support/) and the named test modules or packages, with their data; without it the
whole package goes in.
"""

import argparse
import pathlib
import sys
import zipfile

# Standard library modules the Guest's archive omits (guest/mkstdlib.py) without which
# whole test modules cannot be imported: test.support imports getpass and
# test.support.script_helper py_compile at their top, test_decimal needs _pydecimal
# (its tests of the pure-Python twin then run on the Guest's interpreter too), and
# test_asyncio's helpers import socketserver, http.server and wsgiref at their top (tests using a
# server are skipped for want of network). They are added to the test archive only,
# compiled from the same source.
SUPPORT_NEEDS = ["getpass.py", "py_compile.py", "_pydecimal.py", "socketserver.py", "http/server.py",
                 "wsgiref/__init__.py", "wsgiref/handlers.py", "wsgiref/headers.py",
                 "wsgiref/simple_server.py", "wsgiref/util.py", "wsgiref/types.py", "wsgiref/validate.py"]


def included(rel, only):
    """Whether test/<rel> goes in, given the modules named by --only (None: everything):
    of the test modules and packages (test_*.py, test_*/), only those named; everything
    else (test.support, helper modules, data files and folders) always."""
    if only is None:
        return True
    top = rel.split("/")[0]
    if not top.startswith("test_") or not (top.endswith(".py") or "/" in rel):
        return True
    return any(top == name.split("/")[0] + ".py" or top == name.split("/")[0] for name in only)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--guest", required=True, type=pathlib.Path, help="the guest/ folder")
    parser.add_argument("--lib", required=True, type=pathlib.Path, help="CPython's Lib folder")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--only", action="append", help="a test module or package, e.g. test_string")
    args = parser.parse_args()
    if sys.version_info[:3] != (3, 11, 2):
        sys.exit(f"mktestzip: needs CPython 3.11.2 (the Guest's), not {sys.version.split()[0]}")
    sys.dont_write_bytecode = True  # leave no __pycache__ in guest/
    sys.path.insert(0, str(args.guest))
    import mkstdlib  # noqa: E402  (guest/mkstdlib.py: one way to compile the Guest's Python)

    only = None
    if args.only:
        only = [name.replace(".", "/") for name in args.only]
    tests = args.lib / "test"
    if not (tests / "__init__.py").is_file():
        sys.exit(f"mktestzip: {tests} is not CPython's test package")

    base = zipfile.ZipFile(args.guest / "artifact" / "python311.zip")
    names = set(base.namelist())
    count = 0
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_STORED) as out:
        for info in base.infolist():
            out.writestr(info, base.read(info))
        for rel in SUPPORT_NEEDS if (tests / "support").is_dir() else []:
            if rel[:-3] + ".pyc" not in names:
                info = zipfile.ZipInfo(rel[:-3] + ".pyc", mkstdlib.DATE)
                info.external_attr = 0o444 << 16
                out.writestr(info, mkstdlib.pyc((args.lib / rel).read_bytes(), rel))
        for path in sorted(tests.rglob("*")):
            rel = path.relative_to(tests).as_posix()
            if path.is_dir() or "__pycache__" in rel.split("/") or not included(rel, only):
                continue
            data = path.read_bytes()
            name = "test/" + rel
            if rel.endswith(".py"):
                try:
                    data = mkstdlib.pyc(data, name)
                    name = name[:-3] + ".pyc"
                except SyntaxError:
                    pass  # broken on purpose (bad_coding.py, badsyntax_*.py): kept as source
            if name in names:
                sys.exit(f"mktestzip: {name} is already in the Guest's archive")
            info = zipfile.ZipInfo(name, mkstdlib.DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o444 << 16
            out.writestr(info, data)
            count += 1
    print(f"{count} files of the test package added", file=sys.stderr)


if __name__ == "__main__":
    main()
