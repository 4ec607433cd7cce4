"""Run one module of CPython's test package with unittest and record every test's outcome.

The same file runs on both sides, so their outcomes compare test id by test id:

- in the Guest, as a Spine program: inputs = {"module": ..., "resources": [...],
  "assume": [...]}; the report is the run's value;
- natively: python3.11 -I driver.py LIBDIR MODULE RESOURCES ASSUME OUTFILE, where LIBDIR
  holds the test package and RESOURCES and ASSUME are comma-separated lists; the report is
  written to OUTFILE.

A module runs as CPython's regrtest runs it: its test_main() when it has one, else the
tests unittest loads from it (load_tests included), with test.support.use_resources set
to RESOURCES. ASSUME names flags of test.support set to True before the module is
imported (has_socket_support, for asyncio's tests, which CPython skips wholesale on WASI).
The report:

    {"module", "status": "ok" | "module missing" | "import error" | "crashed",
     "detail", "tests": [[id, outcome, detail], ...], "seconds"}

where outcome is pass, fail, error, skip, xfail (an expected failure) or xpass (an
unexpected success), and detail is the skip reason or the exception's last line.

In the Guest the test package lives inside the standard library's zip archive, where
open() and os.listdir() cannot reach its data files (math_testcases.txt,
decimaltestdata/, ...). zip_files() makes read-only opens, listings and stats of paths
inside the archive answer from it, and load_package_tests() finds a package's test
modules through its importer instead of listing its folder. Nothing else is changed.
"""

import importlib
import importlib.util
import io
import os
import pkgutil
import stat
import sys
import time
import traceback
import unittest

DETAIL = 300  # characters of a skip reason or an exception's last line
TRACE = 2000  # characters of a failure's traceback


def one_line(text):
    text = " ".join(str(text).split())
    return text if len(text) <= DETAIL else text[:DETAIL - 3] + "..."


class Recorder(unittest.TestResult):
    """Every test id with its outcome, in the order they ended; a test with failing
    subtests is recorded once, as its first failure."""

    def __init__(self):
        super().__init__()
        self.outcomes = {}
        self.traces = {}

    def _put(self, test, outcome, detail="", err=None):
        test_id = test.id()
        if test_id in self.outcomes and self.outcomes[test_id][0] in ("fail", "error"):
            return
        self.outcomes[test_id] = (outcome, one_line(detail))
        if err is not None:
            trace = "".join(traceback.format_exception(*err))
            self.traces[test_id] = trace[-TRACE:]

    @staticmethod
    def _last_line(err):
        """The exception as one line: its type and the last line of its message (the
        message of a module that failed to import is a whole traceback)."""
        lines = [line for line in str(err[1]).splitlines() if line.strip()]
        if not lines:
            return err[0].__name__
        line = lines[-1] if lines[0].startswith("Failed to import test module") else lines[0]
        return f"{err[0].__name__}: {line.strip()}"

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "fail", self._last_line(err), err)

    def addError(self, test, err):
        super().addError(test, err)
        self._put(test, "error", self._last_line(err), err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._put(test, "xfail", self._last_line(err))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._put(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            self._put(test, kind, f"{subtest._subDescription()}: {self._last_line(err)}", err)


def zip_files(archive):
    """Make paths inside archive readable through open(), os.listdir() and os.stat()."""
    import builtins
    import zipfile

    zf = zipfile.ZipFile(archive)
    files = {}
    dirs = {""}
    for info in zf.infolist():
        name = info.filename.rstrip("/")
        if info.is_dir():
            dirs.add(name)
        else:
            files[name] = info
        parts = name.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    prefix = archive + "/"

    def inside(path):
        try:
            path = os.fspath(path)
        except TypeError:
            return None
        if isinstance(path, bytes) or not (path == archive or path.startswith(prefix)):
            return None
        return os.path.normpath(path)[len(prefix):] if path != archive else ""

    real_open, real_listdir, real_stat = builtins.open, os.listdir, os.stat

    def open_(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
              closefd=True, opener=None):
        name = inside(file) if not isinstance(file, int) else None
        if name is None or name not in files or set(mode) & set("wax+"):
            return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        data = io.BytesIO(zf.read(files[name]))
        data.name = os.fspath(file)
        if "b" in mode:
            return data
        if encoding is None:
            encoding = io.text_encoding(None)
        text = io.TextIOWrapper(data, encoding, errors, newline)
        text.mode = mode
        return text

    def listdir(path="."):
        name = inside(path)
        if name is None or name not in dirs:
            return real_listdir(path)
        lead = name + "/" if name else ""
        entries = {n[len(lead):].split("/")[0] for n in list(files) + list(dirs)
                   if n.startswith(lead) and n != name}
        return sorted(entries)

    def stat_(path, *args, **kwargs):
        name = inside(path)
        if name is None or (name not in files and name not in dirs):
            return real_stat(path, *args, **kwargs)
        if name in files:
            return os.stat_result((stat.S_IFREG | 0o444, 0, 0, 1, 0, 0, files[name].file_size, 0, 0, 0))
        return os.stat_result((stat.S_IFDIR | 0o555, 0, 0, 1, 0, 0, 0, 0, 0, 0))

    builtins.open = io.open = open_
    os.listdir = listdir
    os.stat = stat_


def load_package_tests_from_importer(original):
    """test.support.load_package_tests for a package inside a zip archive: the package's
    own tests, then those of each module whose name matches pattern, found through the
    package's importer rather than by listing its folder."""
    import fnmatch

    def load_package_tests(pkg_dir, loader, standard_tests, pattern):
        if not any(pkg_dir.startswith(p + "/") for p in sys.path if p.endswith(".zip")):
            return original(pkg_dir, loader, standard_tests, pattern)
        if pattern is None:
            pattern = "test*"
        package = next(name for name, module in sys.modules.items()
                       if getattr(module, "__path__", None) and pkg_dir in list(module.__path__))
        for info in sorted(pkgutil.iter_modules([pkg_dir]), key=lambda i: i.name):
            if not fnmatch.fnmatch(info.name + ".py", pattern):
                continue
            name = f"{package}.{info.name}"
            try:  # as discover does: a module that cannot be imported is one failed test
                module = importlib.import_module(name)
            except unittest.SkipTest as exc:
                standard_tests.addTest(unittest.loader._make_skipped_test(name, exc, loader.suiteClass))
            except Exception:
                test, error = unittest.loader._make_failed_import_test(name, loader.suiteClass)
                loader.errors.append(error)
                standard_tests.addTest(test)
            else:
                standard_tests.addTests(loader.loadTestsFromModule(module, pattern=pattern))
        return standard_tests

    return load_package_tests


def missing_module(exc):
    """The module a failed import lacked, when that is why it failed."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and not exc.name.startswith("test."):
        return exc.name
    if isinstance(exc, unittest.SkipTest) and str(exc).startswith("No module named"):
        return str(exc).split("No module named", 1)[1].strip(" '\"")
    return None


def run(module_name, resources, assume=()):
    try:
        return run_module(module_name, resources, assume)
    except BaseException:
        return {"module": module_name, "status": "crashed", "detail": traceback.format_exc()[-TRACE:],
                "tests": []}


# Tests that need a thread running beside the one that waits for it. The Guest runs a
# thread to its end when it starts (docs/python.md), so they would wait for the run's
# deadline: in the Guest they are skipped with this reason. Module (without "test."):
# class names.
THREAD_BESIDE = "needs a thread running beside the event loop (the Guest runs a thread to its end at start)"
GUEST_SKIPS = {
    "test_asyncio.test_tasks": {"RunCoroutineThreadsafeTests": THREAD_BESIDE},
}


def skip_in_guest(module_name, module):
    if sys.platform != "wasi":
        return
    for name, reason in GUEST_SKIPS.get(module_name.removeprefix("test."), {}).items():
        cls = getattr(module, name, None)
        if cls is not None:
            cls.__unittest_skip__ = True
            cls.__unittest_skip_why__ = reason


def run_module(module_name, resources, assume):
    started = time.perf_counter()
    report = {"module": module_name, "status": "ok", "detail": "", "tests": []}
    recorder = Recorder()
    if importlib.util.find_spec("test.support") is not None:
        from test import support
    else:
        support = None  # a test package of its own (the Go tests'), without test.support
    if support is not None:
        for name in assume:
            setattr(support, name, True)
        support.use_resources = list(resources)
        support.verbose = 0
        support.load_package_tests = load_package_tests_from_importer(support.load_package_tests)
        # support.run_unittest and run_doctest (what a test_main calls) report to recorder.
        support._run_suite = lambda suite: suite.run(recorder)

        def run_doctest(module, verbosity=None, optionflags=0):
            import doctest
            doctest.DocTestSuite(module, optionflags=optionflags).run(recorder)
        support.run_doctest = run_doctest
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # the module could not even be imported
        missing = missing_module(exc)
        if missing:
            report.update(status="module missing", detail=missing)
        elif isinstance(exc, unittest.SkipTest):
            recorder.outcomes[module_name] = ("skip", one_line(exc))
        else:
            report.update(status="import error", detail=one_line(traceback.format_exc()[-TRACE:]))
        report["tests"] = [[k, o, d] for k, (o, d) in recorder.outcomes.items()]
        report["seconds"] = round(time.perf_counter() - started, 3)
        return report
    skip_in_guest(module_name, module)
    try:
        test_main = getattr(module, "test_main", None)
        if test_main is not None:
            test_main()
        else:
            loader = unittest.TestLoader()
            suite = loader.loadTestsFromModule(module)
            for error in loader.errors:
                report["detail"] += one_line(error)
            suite.run(recorder)
    except BaseException:
        report.update(status="crashed", detail=traceback.format_exc()[-TRACE:])
    report["tests"] = [[k, o, d] for k, (o, d) in recorder.outcomes.items()]
    report["traces"] = recorder.traces
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


if "inputs" in globals():  # in the Guest, as a Spine program
    zip_files(next(p for p in sys.path if p.endswith(".zip")))
    result = run(inputs["module"], inputs.get("resources", []), inputs.get("assume", []))  # noqa: F821
elif __name__ == "__main__":  # natively
    import json

    lib, module_name, resources, assume, out = sys.argv[1:6]
    sys.path.insert(0, lib)
    report = run(module_name, [r for r in resources.split(",") if r], [a for a in assume.split(",") if a])
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f)
