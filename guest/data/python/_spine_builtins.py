"""Finds the C modules of packages linked into the data Guest (numpy.core._multiarray_umath
and the like): they are in the inittab under their dotted names, which CPython 3.11's
BuiltinImporter does not look for (it takes top-level names only). The data Guest's
warm-up imports this module first (data.Preload), which puts the finder on sys.meta_path."""

import _imp
import sys
from importlib import _bootstrap


class DottedBuiltins:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is None or not _imp.is_builtin(name):
            return None
        return _bootstrap.spec_from_loader(name, _bootstrap.BuiltinImporter, origin="built-in")


if DottedBuiltins not in sys.meta_path:
    sys.meta_path.insert(0, DottedBuiltins)
