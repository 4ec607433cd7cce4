"""Prefix mode: read the program while it streams in, and prepare the early-read calls
whose arguments are known from constants and ``inputs`` before it has all of it.

``prefix_begin`` starts a reader for the run, ``prefix_feed`` hands it the next chunk;
each complete top-level statement is analysed with the rules of the pass
(``plm.rewrite``) and the values known so far. ``execute`` then runs the whole program
with the pass on, and the pass's prepares of the same requests adopt those reads
(``plm.futures._spare``) instead of starting them again.
"""

import ast
import re
import sys
from builtins import (
    Exception,
    RecursionError,
    SyntaxError,
    UnicodeDecodeError,
    ValueError,
    Warning,
    any,
    bytearray,
    bytes,
    compile,
    frozenset,
    id,
    len,
    list,
    max,
    min,
    set,
    sum,
    type,
)

from plm import futures
from plm.chain import advance, spec_target
from plm.facts import _Facts, _usable_tools
from plm.futures import pending
from plm.purity import (
    _SCALAR,
    _keys_scalar,
    _TRUTHY,
    _binder,
    _Compiler,
    _key_cache,
    _NotPure,
)
from plm.rewrite import HELPER, _Pass, _Scanner

__all__ = ["prefix_begin", "prefix_feed", "reset"]

_modules = sys.modules
_ModuleType = type(sys)

MAX_STATEMENT = 64 << 10  # prefix mode gives up on a statement longer than this

_prefix = None  # the prefix reader of the run, between prefix_begin and execute


def reset():
    """Forget the prefix reader and every value it evaluated: the state of a run that has
    ended, or of one whose program is about to run and may need the memory."""
    global _prefix
    _prefix = None
    _key_cache.clear()  # it holds the containers the last evaluation looked into


class _Prefix:
    """Reads a program as it streams in and prepares what it can before it has all of it.

    A top-level statement is complete once a later line starts at column 0 with something
    that does not continue it (not else/elif/except/finally, not a comment or blank line)
    and the text before that line parses. Each complete statement is analysed with the
    values known so far: names bound by simple assignments of pure data computed from
    constants and inputs. Anything else a statement binds or may change becomes unknown;
    statements that are not understood are passed over."""

    def __init__(self, inputs, tools):
        self.early = {t["name"] for t in tools if t.get("early")}
        self.leaves = frozenset(t.rpartition(".")[2] for t in self.early)
        self.known = {"inputs": inputs}
        self.alias = {"inputs": frozenset()}  # name -> names whose objects its value may share
        self.rebound = set()  # every name a statement so far binds (no built-in under them)
        self.declared = set()  # names some function declares global: never known
        self.dead = set()  # early tools whose name the program rebinds
        self.buf = bytearray()
        self.consumed = 0  # start of the first statement not yet read
        self.line = -1  # start of the line that may end it, -1 when not found yet
        self.searched = 0  # no newline between the line being looked for and this offset
        self.tried = -1  # the last line start whose preceding text failed to parse
        self.failed = 0  # length of the longest text that failed to parse
        self.scanned = 0  # brackets and strings are known up to this offset:
        self.depth = 0  # open brackets
        self.quote = None  # the quote of the string the text is in, or None
        self.count = 0
        self.stopped = False
        # Chained reads: name -> handle of the read prefix mode started for a statement
        # `name = tool(...)`, until its value arrives (then name is known, speculatively)
        # or a later statement may change name. waiting: candidates that read such names.
        self.specs = {}
        self.waiting = []

    def feed(self, chunk):
        if self.stopped:
            return self.count
        if self.specs:
            self.poll()
        buf = self.buf
        buf += chunk
        n = len(buf)
        while True:
            if self.line < 0:
                nl = buf.find(b"\n", max(self.consumed, self.searched))
                if nl < 0:
                    self.searched = n
                    break
                self.line = self.searched = nl + 1
            at = self.line
            if at >= n:
                break
            if at - self.consumed > MAX_STATEMENT:
                self.stopped = True  # a statement this long is not worth waiting for
                break
            first = buf[at]
            boundary = first not in b" \t\r\n\x0c#"
            if boundary and _word_byte(first) and not 48 <= first <= 57:
                # A line that starts with else/elif/except/finally continues the statement.
                end, limit = at, min(n, at + 9)
                while end < limit and _word_byte(buf[end]):
                    end += 1
                if end == n:
                    break  # the word may go on
                if buf[at:end] in (b"else", b"elif", b"except", b"finally"):
                    boundary = False
            if boundary:
                self.scan(at)
                boundary = self.depth <= 0 and self.quote is None
            size = at - self.consumed
            if boundary and self.tried != at and (self.failed < 2048 or size >= self.failed + 1024):
                # A statement that does not parse though its brackets and strings are
                # closed is tried again at every such line until 2 KiB, then every KiB.
                body = self.parse(bytes(buf[self.consumed : at]))
                if self.stopped:
                    break
                if body is not None:
                    self.consumed = self.searched = self.scanned = at
                    self.line = -1
                    self.failed = self.depth = 0
                    self.quote = None
                    for stmt in body:
                        self.statement(stmt)
                    if self.stopped:
                        break
                    continue
                self.tried = at
                self.failed = size
            nl = buf.find(b"\n", max(at, self.searched))
            if nl < 0:
                self.searched = n
                break
            self.line = self.searched = nl + 1
        return self.count

    def scan(self, end):
        """Follow brackets, strings and comments from self.scanned up to end (a line start)."""
        buf, pos, quote, depth = self.buf, self.scanned, self.quote, self.depth
        while pos < end:
            if quote is not None:
                match = _STRING_STOP[quote].search(buf, pos, end)
                if match is None:
                    pos = end
                elif match.group() == b"\\":
                    pos = match.end() + 1  # an escaped character (raw strings too)
                elif len(quote) == 1 or buf[match.start() : match.start() + 3] == quote:
                    pos, quote = match.start() + len(quote), None
                else:
                    pos = match.end()
                continue
            match = _CODE_STOP.search(buf, pos, end)
            if match is None:
                break
            c = match.group()
            pos = match.end()
            if c == b"#":
                nl = buf.find(b"\n", pos, end)
                pos = end if nl < 0 else nl + 1
            elif c == b"'" or c == b'"':
                triple = bytes(buf[pos - 1 : pos + 2])
                if triple == c * 3:
                    quote, pos = triple, pos + 2
                else:
                    quote = c
            elif c == b"\\":
                pos += 1
            elif c in b"([{":
                depth += 1
            else:
                depth -= 1
        self.scanned, self.quote, self.depth = end, quote, depth

    def parse(self, data):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.stopped = True
            return None
        quiet = _quiet_warnings() if "\\" in text or _NUMBER_WORD.search(text) else None
        try:
            return compile(text, "<prefix>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True).body
        except (SyntaxError, ValueError):
            return None
        finally:
            if quiet is not None:
                quiet[0]["filters"] = quiet[1]

    def statement(self, stmt):
        try:
            self._statement(stmt)
        except Exception:
            self.stopped = True

    def _statement(self, stmt):
        facts = _Facts([stmt], self.leaves)
        bound, attrs, declared = facts.bound, facts.attrs, facts.declared
        shadowed = self.rebound | bound
        tools = _usable_tools(self.early - self.dead, bound, attrs)
        target = spec_target(stmt)
        spec = 0
        if tools:
            scanner = _Scanner(tools, shadowed, "")
            lifted = _Pass(scanner, facts, self.declared | declared, HELPER, insert=False).block([stmt])
            for cand in lifted:
                if cand.free <= self.known.keys():
                    futures.last_handle = 0
                    ok = self.run(cand.plan)
                    if ok is False:
                        break
                    if ok is True and target is not None and cand.node is stmt.value:
                        spec = futures.last_handle
                elif self.specs and cand.free <= self.known.keys() | self.specs.keys():
                    self.waiting.append(cand)
        if type(stmt) is ast.If and not declared:
            truth = self.value(stmt.test, shadowed)
            if truth is not _UNKNOWN and id(type(truth)) in _TRUTHY:
                for s in stmt.body if truth else stmt.orelse:
                    self.statement(s)
                return
        self.update(stmt, facts, shadowed)
        if spec and target not in self.declared:
            self.specs[target] = spec

    def poll(self):
        """Bind the names of chained reads whose values have arrived, and prepare the
        waiting candidates whose names are all known now (plm.chain)."""
        try:
            before = list(self.specs)
            self.waiting = advance(self.specs, self.known, self.waiting, self._run_waiting)
            for name in before:
                if name in self.known:
                    self.alias[name] = frozenset()
        except Exception:
            self.specs.clear()
            self.waiting = []

    def _run_waiting(self, cand):
        self.run(cand.plan)

    def run(self, plan):
        try:
            _key_cache.clear()
            ok = plan((None, self.known), True)
        except Exception:
            ok = None
        finally:
            _key_cache.clear()
        self.count = sum([len(handles) for handles in pending.values()])
        return ok

    def value(self, node, shadowed):
        try:
            compiler = _Compiler(shadowed)
            fn = compiler.expr(node)
            if not compiler.free <= self.known.keys():
                return _UNKNOWN
            _key_cache.clear()
            return fn((None, self.known))
        except Exception:
            return _UNKNOWN
        finally:
            _key_cache.clear()

    def update(self, stmt, facts, shadowed):
        bound, attrs, declared = facts.bound, facts.attrs, facts.declared
        self.declared |= declared
        self.rebound |= bound
        for name in self.early:
            segments = name.split(".")
            if segments[0] in bound or any(s in attrs for s in segments[1:]):
                self.dead.add(name)
        rebound, mutated, everything = facts.effects[id(stmt)]
        if everything:
            self.known.clear()
            self.alias.clear()
            self.specs.clear()
            self.waiting = []
            return
        if self.specs or self.waiting:
            changed = rebound | mutated | declared | self.declared
            for name in changed:
                self.specs.pop(name, None)
            self.waiting = [c for c in self.waiting if not c.free & changed]
        values = {}
        targets, value = None, None
        if type(stmt) is ast.Assign:
            targets, value = stmt.targets, stmt.value
        elif type(stmt) is ast.AnnAssign and stmt.value is not None and stmt.simple:
            targets, value = [stmt.target], stmt.value
        if targets is not None:
            values = self.assigned(targets, value, shadowed)
        for name in mutated:
            self.forget_object(name)
        for name in rebound | declared | self.declared:
            self.known.pop(name, None)
            self.alias.pop(name, None)
        for name, (v, shares) in values.items():
            if name not in self.declared:
                self.known[name] = v
                self.alias[name] = shares

    def assigned(self, targets, node, shadowed):
        """name -> (value, aliases) for an assignment of a pure value to names."""
        compiler = _Compiler(shadowed)
        try:
            fn = compiler.expr(node)
        except (_NotPure, RecursionError):
            return {}
        if not compiler.free <= self.known.keys():
            return {}
        try:
            _key_cache.clear()
            value = fn((None, self.known))
        except Exception:
            return {}
        finally:
            _key_cache.clear()
        out = {}
        for target in targets:
            try:
                bind, _ = _binder(target)
                overlay = {}
                bind(overlay, value)
            except Exception:
                return {}
            out.update(overlay)
        shares = set()
        for name in compiler.free:
            shares.add(name)
            shares |= self.alias.get(name, frozenset())
        shares |= out.keys()
        result = {}
        for name, v in out.items():
            result[name] = (v, frozenset() if id(type(v)) in _SCALAR else frozenset(shares - {name}))
        return result

    def forget_object(self, name):
        """name's object may have changed: forget every name whose value may share it."""
        group = {name} | self.alias.get(name, frozenset())
        for other in list(self.known):
            if other in group or self.alias.get(other, frozenset()) & group:
                self.known.pop(other, None)
                self.alias.pop(other, None)


# The parser warns about invalid escape sequences and numbers run into a word (1if); the
# program's own parse warns again, so prefix mode's parse must not print them. It swaps
# the warnings module's filters for one that ignores every warning while it parses, when
# the text could warn: no registry is touched (the parser passes none), no version bumped.
_NUMBER_WORD = re.compile(r"[0-9][A-Za-z_]")
_IGNORE_ALL = [("ignore", None, Warning, None, 0)]


def _quiet_warnings():
    """(the warnings module's dict, its filters) after swapping in _IGNORE_ALL, or None
    when that cannot be done without running program code (then the parse may warn)."""
    _key_cache.clear()
    try:
        mod = _modules.get("warnings") if _keys_scalar(_modules) else None
        if type(mod) is not _ModuleType:
            return None
        d = mod.__dict__
        if not _keys_scalar(d) or type(d.get("filters")) is not list:
            return None
    finally:
        _key_cache.clear()
    saved = d["filters"]
    d["filters"] = _IGNORE_ALL
    return d, saved


_UNKNOWN = object()
# What changes the state of the prefix reader's scan: in code, and in each kind of string.
_CODE_STOP = re.compile(rb"""["'#()\[\]{}\\]""")
_STRING_STOP = {q: re.compile(rb"\\|" + re.escape(q[:1])) for q in (b"'", b'"', b"'''", b'"""')}


def _word_byte(b):
    """Whether byte b can be part of an identifier (any byte of a non-ASCII character can)."""
    return b == 95 or 48 <= b <= 57 or 97 <= (b | 32) <= 122 or b >= 128


def prefix_begin(inputs, tools):
    """Start reading a streamed program with these inputs and tools (the Host's tool
    list: [{"name", "early"}, ...])."""
    global _prefix
    _prefix = _Prefix({} if inputs is None else inputs, tools)


def prefix_feed(chunk):
    """Read the next chunk of the program; return how many reads prefix mode has prepared."""
    if _prefix is None:
        return 0
    return _prefix.feed(chunk)
