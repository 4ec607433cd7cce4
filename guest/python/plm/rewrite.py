"""The PLM pass (prepare -> linearize -> materialize), docs/early-reads.md.

``transform`` inserts statements ``__spine_prepare("<key>", ...)`` into the program's AST
at the earliest point where the arguments of an early-read call can be computed, and keeps
the plans those keys name: what one prepare statement runs (the arguments computed by the
evaluator of ``plm.purity``, then ``plm.futures._offer``). ``run_plans`` is the helper
(``HELPER``, a builtin of every Guest, early reads on or off, so no program can tell the
difference): it runs the plans and never raises.
"""

import ast
import opcode
from builtins import (
    BaseException,
    Exception,
    RecursionError,
    bytearray,
    bytes,
    compile,
    dict,
    enumerate,
    frozenset,
    id,
    len,
    max,
    range,
    set,
    str,
    tuple,
    type,
    zip,
)

from plm import chain, futures, wire
from plm.chain import spec_target
from plm.facts import (
    _COMPS,
    _children,
    _dotted,
    _Facts,
    _usable_tools,
)
from plm.futures import _offer_call, _spare_calls, pending
from plm.purity import (
    _binder,
    _Compiler,
    _iter_of,
    _key_cache,
    _keys_scalar,
    _NotPure,
    _truth,
)

__all__ = ["HELPER", "transform", "materialize", "run_plans", "reset"]

CAP = 64  # requests one loop or comprehension prepares at its entry
MAX_VISITS = 1024  # elements one loop or comprehension entry may look at
HELPER = "__spine_prepare"

_plans = {}  # plan key -> plan, for run_plans
_inserted = []  # (block, statement) of each prepare statement in the run's tree
_ns = None  # the running program's namespace


def reset():
    """Forget every plan: the state of a run that has ended."""
    global _ns
    _plans.clear()
    _inserted.clear()
    _ns = None


def run_plans(*keys):
    """The helper the rewritten program calls: run the plans named by keys, in order.
    Anything else (no plans, unknown keys, a program calling it itself) does nothing."""
    try:
        futures.busy = True
        _key_cache.clear()
        ns = _ns
        for key in keys:
            if _plans[key]((None, ns)) is False:
                break
    except BaseException:
        pass
    finally:
        _key_cache.clear()
        futures.busy = False


# Plans: what one prepare statement runs ------------------------------------


def _single_plan(tool, names, fns):
    def plan(env, spare=False):
        return _offer_call(tool, names, fns, env, spare)

    return plan


def _batch_plan(gens, calls):
    """Prepare calls for each element of gens (a loop or a comprehension's for clauses):
    gens is [(bind, iterable, filters)], calls [(tool, names, fns)]. At most CAP
    prepares and MAX_VISITS elements."""

    def plan(env, spare=False):
        budget = [CAP, MAX_VISITS]
        return _batch(gens, 0, env[0], env[1], calls, budget, spare)

    return plan


def _batch(gens, k, overlay, ns, calls, budget, spare):
    bind, iterable, filters = gens[k]
    try:
        it = _iter_of(iterable((overlay, ns)))
    except Exception:
        return None
    last = k + 1 == len(gens)
    for item in it:
        budget[1] -= 1
        if budget[0] <= 0 or budget[1] < 0:
            return None
        inner = dict(overlay) if overlay else {}
        try:
            bind(inner, item)
            env = (inner, ns)
            skip = False
            for f in filters:
                if not _truth(f(env)):
                    skip = True
                    break
        except Exception:
            continue
        if skip:
            continue
        if not last:
            if _batch(gens, k + 1, inner, ns, calls, budget, spare) is False:
                return False
            continue
        for tool, names, fns in calls:
            budget[0] -= 1
            if _offer_call(tool, names, fns, env, spare) is False:
                return False
            if budget[0] <= 0:
                return None
    return None


# Finding the calls to prepare ----------------------------------------------


class _Cand:
    """One thing to prepare: a single call or a batch over a loop or comprehension."""

    __slots__ = ("plan", "free", "text", "single", "calls", "node", "lead", "home")

    def __init__(self, plan, free, text, single=None, calls=(), node=None):
        self.plan = plan  # plan(env, spare) -> True / False / None
        self.free = free  # names the arguments read
        self.text = text  # () -> the plan's key: its source text
        self.single = single  # (tool, names, fns) for one call, else None
        self.calls = calls  # (tool, keyword names) of each call it prepares
        self.node = node  # the call, for one call
        self.home = 0  # the number (_Pass.count) of the statement that makes the call(s)
        # True when its prepare would land right before the statement that makes the call,
        # with nothing but quiet evaluation (_first_event) between the two: the prepare
        # cannot win time, and _Pass.finish leaves it out unless a read of the same request
        # may be pending then.
        self.lead = False


class _Scanner:
    """Finds the early-read calls an expression always makes when it is evaluated."""

    def __init__(self, tools, shadowed, source):
        self.tools = tools
        self.shadowed = shadowed
        self.source = source
        self._starts = None

    # Source text of nodes, for plan keys (col offsets count UTF-8 bytes).
    def segment(self, node):
        try:
            if self._starts is None:
                data = self.source.encode("utf-8")
                starts, at = [0], 0
                for line in data.splitlines(True):
                    at += len(line)
                    starts.append(at)
                self._data, self._starts = data, starts
            start = self._starts[node.lineno - 1] + node.col_offset
            end = self._starts[node.end_lineno - 1] + node.end_col_offset
            return self._data[start:end].decode("utf-8")
        except Exception:
            return ast.unparse(node)

    def single(self, node):
        """A candidate for the call node, if it calls an early tool with pure arguments."""
        tool = _dotted(node.func)
        if tool is None or tool not in self.tools:
            return None
        names = []
        values = []
        if node.args:
            # Positional arguments are named as the tool's proxy names them (wire.bind).
            check = wire.keywords.get(tool)
            order = None if check is None else check[2]
            if order is None or len(node.args) > len(order):
                return None  # the call raises TypeError
            for name, arg in zip(order, node.args):
                if type(arg) is ast.Starred:
                    return None
                names.append(name)
                values.append(arg)
        compiler = _Compiler(self.shadowed)
        try:
            fns = [compiler.expr(value) for value in values]
            for k in node.keywords:
                if k.arg is None:
                    return None
                names.append(k.arg)
                fns.append(compiler.expr(k.value))
        except (_NotPure, RecursionError):
            return None
        names = tuple(names)
        if len(set(names)) != len(names):
            return None  # a value given twice: the call raises TypeError
        plan = _single_plan(tool, names, fns)
        return _Cand(plan, compiler.free, lambda: self.segment(node), (tool, names, fns), ((tool, names),), node)

    def scan(self, node, out):
        """Append to out the candidates for the calls node makes whenever it is evaluated,
        in the order it makes them. Conditional parts (if-expression branches, the right of
        and/or, the rest of a comparison chain) and nested scopes are not entered."""
        t = type(node)
        if t is ast.Call:
            cand = self.single(node)
            if cand is not None:
                out.append(cand)
                return
        elif t in _COMPS:
            self.scan(node.generators[0].iter, out)
            cand = self.comprehension(node)
            if cand is not None:
                out.append(cand)
            return
        elif t is ast.Lambda:
            return
        elif t is ast.IfExp:
            self.scan(node.test, out)
            return
        elif t is ast.BoolOp:
            self.scan(node.values[0], out)
            return
        elif t is ast.Compare:
            self.scan(node.left, out)
            self.scan(node.comparators[0], out)
            return
        children = []
        _children(node, children)
        for child in children:
            self.scan(child, out)

    def element_calls(self, node, out):
        """The early-tool calls with pure arguments in a comprehension's element."""
        found = []
        self.scan(node, found)
        out.extend(c for c in found if c.single is not None)

    def comprehension(self, node):
        """A batch candidate: every element's calls, prepared when the comprehension starts."""
        try:
            gens = []
            targets = set()
            free = set()
            for k, g in enumerate(node.generators):
                if g.is_async:
                    return None
                bind, names = _binder(g.target)
                compiler = _Compiler(self.shadowed)
                iterable = compiler.expr(g.iter)
                # The first iterable is evaluated outside the comprehension.
                free |= compiler.free if k == 0 else compiler.free - targets
                targets |= names
                compiler.free = set()
                filters = [compiler.expr(f) for f in g.ifs]
                free |= compiler.free - targets
                gens.append((bind, iterable, filters))
        except (_NotPure, RecursionError):
            return None
        calls = []
        if type(node) is ast.DictComp:
            self.element_calls(node.key, calls)
            self.element_calls(node.value, calls)
        else:
            self.element_calls(node.elt, calls)
        if not calls:
            return None
        for c in calls:
            free |= c.free - targets
        plan = _batch_plan(gens, [c.single for c in calls])
        return _Cand(plan, free, lambda: self.segment(node), None, [c.calls[0] for c in calls])

    def loop(self, stmt, cands):
        """A batch candidate for the body calls of a for statement that can be computed
        from the loop variables and names the body does not change, or None."""
        try:
            bind, targets = _binder(stmt.target)
            compiler = _Compiler(self.shadowed)
            iterable = compiler.expr(stmt.iter)
        except (_NotPure, RecursionError):
            return None
        free = set(compiler.free)
        for c in cands:
            free |= c.free - targets

        def text():
            calls = "; ".join(c.text() for c in cands)
            return f"for {self.segment(stmt.target)} in {self.segment(stmt.iter)}: {calls}"

        plan = _batch_plan([(bind, iterable, [])], [c.single for c in cands])
        return _Cand(plan, free, text, None, [c.calls[0] for c in cands])


def _header(stmt):
    """The expressions a statement evaluates when it starts, in order (the whole statement
    for simple statements), or None for a statement whose parts the pass leaves alone."""
    t = type(stmt)
    if t is ast.Expr:
        return [stmt.value]
    if t is ast.Assign:
        return [stmt.value] + stmt.targets
    if t is ast.AugAssign:
        return [stmt.target, stmt.value]
    if t is ast.AnnAssign:
        return [stmt.target] if stmt.value is None else [stmt.value, stmt.target]
    if t is ast.If or t is ast.While:
        return [stmt.test]
    if t is ast.For:
        return [stmt.iter]
    if t is ast.With:
        return [item.context_expr for item in stmt.items]
    if t is ast.Match:
        return [stmt.subject]
    if t is ast.Return:
        return [] if stmt.value is None else [stmt.value]
    if t is ast.Delete:
        return stmt.targets
    if t is ast.Raise:
        return [e for e in (stmt.exc, stmt.cause) if e is not None]
    if t is ast.Assert:
        return [stmt.test]
    return []


# What evaluating an expression may do before a call in it is made. Quiet: loading names,
# constants and attributes, building lists and tuples, keyword arguments, slices, making a
# lambda. Anything else (another call, a subscript, an operator, a comparison, a truth
# test, formatting, a dict or set display, a starred, ** or comprehension iteration) is work.
_QUIET_LEAVES = frozenset((ast.Name, ast.Constant, ast.Lambda))
_QUIET_OPS = frozenset((ast.Attribute, ast.List, ast.Tuple, ast.keyword, ast.Slice))
_MAX_DISPLAY = 16  # dict displays up to this many pairs are built after all their parts


def _first_event(node, calls):
    """What evaluating node does first: the candidate of calls (call node id -> candidate)
    whose call is made before any work (its own callee and arguments aside), True when
    some work comes first, None when node does nothing but quiet evaluation."""
    cand = calls.get(id(node))
    if cand is not None:
        return cand
    t = type(node)
    if t in _QUIET_LEAVES:
        return None
    if t is ast.Dict:
        keys = node.keys
        if len(keys) > _MAX_DISPLAY:
            return True  # built in chunks: earlier keys are hashed first
        children = []
        for k, v in zip(keys, node.values):
            if k is None:  # **mapping is merged in before what follows
                found = _first_event(v, calls)
                return True if found is None else found
            children.append(k)
            children.append(v)
    elif t is ast.BoolOp:
        children = node.values[:1]  # the rest only after a truth test
    elif t is ast.IfExp:
        children = [node.test]
    elif t is ast.Compare:
        children = [node.left, node.comparators[0]]
    elif t in _COMPS:
        children = [node.generators[0].iter]
    else:
        children = []
        _children(node, children)
    for child in children:
        found = _first_event(child, calls)
        if found is not None:
            return found
    if t in _QUIET_OPS and (t is not ast.keyword or node.arg is not None):
        return None
    return True  # including f(**mapping), which merges the mapping in


def _first_candidate(stmt, cands):
    """The candidate among cands (the candidates of stmt's own expressions, in the order
    it evaluates them) whose call stmt makes before doing any work, or None."""
    header = _header(stmt)
    first = cands[0]
    if first.node is header[0]:  # x = tool(...), tool(...): the statement starts with it
        return first
    calls = {}
    for c in cands:
        if c.single is not None:
            calls[id(c.node)] = c
    if not calls:
        return None
    entering = type(stmt) is ast.With
    try:
        for expr in header:
            found = _first_event(expr, calls)
            if found is not None:
                return None if found is True else found
            if entering:
                return None  # the context manager's __enter__ runs before the next item
    except RecursionError:
        pass
    return None


# The pass ------------------------------------------------------------------


class _Pass:
    """Inserts prepare statements into blocks of module-level code.

    block() walks one block: each statement's candidates (its own calls, the calls of
    try and with bodies, which start with the statement, and for-loop batches) go to the
    earliest point of the block after the last statement that may rebind or change a name
    they read; those that can go to the start of the block are returned to the caller.
    if/elif/else branches, loop bodies, except/else/finally clauses and match cases are
    blocks of their own: what they return is prepared when they are entered.

    Prepares are recorded (place) and inserted at the end (finish), once it is known which
    are worth it: a single call whose prepare would land right before the statement that
    makes it, with nothing but quiet evaluation between the two (cand.lead), is not
    prepared — its read would start when the call starts it anyway — unless a read of the
    same tool with the same keyword names may be pending then (see finish). Statements
    are numbered in source order (count, seq) to tell when a read may be pending."""

    def __init__(self, scanner, facts, declared, helper, insert=True):
        self.scanner = scanner
        self.facts = facts
        self.declared = declared  # names some function may rebind at any time
        self.helper = helper
        self.insert = insert
        self.plans = {}
        self.places = []  # (block, index, candidates to prepare just before block[index])
        self.count = 0  # statements numbered so far, in source order (nested ones included)
        self.seq = {}  # id(statement) -> its number
        self.inserted = []  # (block, statement) of each prepare statement inserted

    def block(self, stmts, start=0):
        last = {}  # name -> index of the last statement that may rebind or change it
        last_all = start - 1  # index of the last statement that may rebind anything
        placed = {}  # index -> candidates to prepare just before stmts[index]
        lifted = []
        insert = self.insert
        for i in range(start, len(stmts)):
            stmt = stmts[i]
            seq = self.seq[id(stmt)] = self.count
            self.count += 1
            cands = self.candidates(stmt)
            first = None  # the candidate stmt's evaluation starts with, once needed
            for cand in cands:
                if cand.free & self.declared:
                    continue
                at = last_all
                for name in cand.free:
                    j = last.get(name, -1)
                    if j > at:
                        at = j
                at += 1
                if max(at, start) < i:
                    cand.lead = False  # hoisted above at least one statement
                elif insert and cand.home == seq and cand.single is not None:
                    # One of stmt's own calls, prepared right before stmt: a lead if the
                    # statement makes it first (lifted calls of a try body come marked).
                    if first is None:
                        first = _first_candidate(stmt, [c for c in cands if c.home == seq]) or False
                    cand.lead = cand is first
                if at <= start:
                    lifted.append(cand)
                else:
                    placed.setdefault(at, []).append(cand)
            changed = self.facts.changes(stmt)
            if changed is None:
                last_all = i
            else:
                for name in changed:
                    last[name] = i
        for at, cands in placed.items():
            self.place(stmts, at, cands)
        return lifted

    def place(self, stmts, at, cands):
        """Prepare cands just before stmts[at] (recorded; finish inserts)."""
        if cands and self.insert:
            self.places.append((stmts, at, cands, self.seq[id(stmts[at])]))

    def entry(self, stmts):
        """A block entered as a whole: its candidates are prepared at its start."""
        self.place(stmts, 0, self.block(stmts))

    def finish(self, pending_calls=frozenset()):
        """Insert the recorded prepares that are worth it.

        A lead candidate is dropped unless a read of the same tool with the same keyword
        names may be pending when its call is made: the call would claim that read (calls
        claim by request bytes), leaving the call it was prepared for without one. Such a
        read is one the pass prepares for another call, from its prepare's statement to the
        statement that makes that call (a loop's batch: to the end of the loop's body), or
        one already pending (pending_calls: the (tool, keyword names) of prefix mode's
        reads, pending for the whole program as far as the pass knows)."""
        places = self.places
        self.places = []
        leads = None
        for _, _, cands, _ in places:
            for c in cands:
                if c.lead:
                    if leads is None:
                        leads = []
                    leads.append(c)
        if leads is not None:
            keep = self.at_risk(places, leads, pending_calls)
        if len(places) > 1:
            # Each block's prepares from its end to its start, so indices stay valid.
            places.sort(key=lambda p: p[1], reverse=True)
        # Every statement is made before any is inserted: a failure while making one
        # (a RecursionError on a deep tree) leaves the tree as the program wrote it.
        made = []
        for stmts, at, cands, _ in places:
            if leads is not None:
                cands = [c for c in cands if not c.lead or id(c) in keep]
                if not cands:
                    continue
            made.append((stmts, at, self.prepare_stmt(cands, stmts[at])))
        for stmts, at, stmt in made:
            stmts.insert(at, stmt)
            self.inserted.append((stmts, stmt))

    @staticmethod
    def at_risk(places, leads, always):
        """The ids of the lead candidates whose call may find a read of its signature
        pending (see finish); always: signatures pending for the whole program."""
        wanted = {c.calls[0] for c in leads}
        spans = {}  # (tool, keyword names) -> [(first, last) statement numbers]
        for _, _, cands, first in places:
            for c in cands:
                if not c.lead:
                    for sig in c.calls:
                        if sig in wanted:
                            spans.setdefault(sig, []).append((first, c.home))
        keep = set()
        for c in leads:
            sig = c.calls[0]
            if sig in always:
                keep.add(id(c))
                continue
            at = c.home
            for first, last in spans.get(sig, ()):
                if first <= at <= last:
                    keep.add(id(c))
                    break
        return keep

    def candidates(self, stmt):
        t = type(stmt)
        out = []
        if id(stmt) in self.facts.calls:
            header = _header(stmt)
            for expr in header:
                self.scanner.scan(expr, out)
            if out and self.insert:
                home = self.count - 1
                for c in out:
                    c.home = home
        if t is ast.If or t is ast.While:
            self.entry(stmt.body)
            if stmt.orelse:
                self.entry(stmt.orelse)
        elif t is ast.For:
            self.loop(stmt, out)
        elif t is ast.Try or t is ast.TryStar:
            out.extend(self.block(stmt.body))
            for handler in stmt.handlers:
                self.entry(handler.body)
            for clause in (stmt.orelse, stmt.finalbody):
                if clause:
                    self.entry(clause)
        elif t is ast.With:
            targets = set()
            for item in stmt.items:
                if item.optional_vars is not None:
                    for node in ast.walk(item.optional_vars):
                        if type(node) is ast.Name:
                            targets.add(node.id)
            inner = []
            for cand in self.block(stmt.body):
                if cand.free & targets:
                    inner.append(cand)
                else:
                    cand.lead = False  # the context expressions and __enter__ run first
                    out.append(cand)
            self.place(stmt.body, 0, inner)
        elif t is ast.Match:
            for case in stmt.cases:
                self.entry(case.body)
        return out

    def loop(self, stmt, out):
        lifted = self.block(stmt.body)
        changed = set()
        anything = False
        for s in stmt.body:
            c = self.facts.changes(s)
            if c is None:
                anything = True
            else:
                changed |= c
        batch, rest = [], []
        for cand in lifted:
            if cand.single is not None and not anything and not cand.free & changed:
                batch.append(cand)
            else:
                rest.append(cand)
        whole = self.scanner.loop(stmt, batch) if batch else None
        if whole is None:
            rest = lifted
        else:
            whole.home = self.count - 1  # its reads may be pending until the body's end
            out.append(whole)
        self.place(stmt.body, 0, rest)
        if stmt.orelse:
            self.entry(stmt.orelse)

    def key(self, cand):
        key = cand.text()
        # The same text means the same computation: the first plan serves them all.
        self.plans.setdefault(key, cand.plan)
        return key

    def prepare_stmt(self, cands, at):
        where = {
            "lineno": at.lineno,
            "col_offset": at.col_offset,
            "end_lineno": at.end_lineno,
            "end_col_offset": at.end_col_offset,
        }
        name = ast.Name(id=self.helper, ctx=ast.Load(), **where)
        args = [ast.Constant(value=self.key(c), **where) for c in cands]
        return ast.Expr(value=ast.Call(func=name, args=args, keywords=[], **where), **where)


def _module_start(body):
    """Where module-level prepares may go: after the docstring and __future__ imports."""
    start = 0
    if body and type(body[0]) is ast.Expr:
        value = body[0].value
        if type(value) is ast.Constant and type(value.value) is str:
            start = 1
    while start < len(body) and type(body[start]) is ast.ImportFrom and body[start].module == "__future__":
        start += 1
    return start


_BLOCKS = frozenset((ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.TryStar, ast.Match))
# Expressions that run code of their own or make a call of their own.
_NOT_PLAIN = frozenset((ast.Call, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)) | frozenset(_COMPS)


def _nothing_to_prepare(body, start, facts):
    """A quick look that spares the pass for a common kind of program: True when body is
    straight-line code in which every statement calling a tool makes exactly one call,
    first, and that statement is the first of the module (start) or reads a name the one
    before it may change. Then every prepare would land right before its own statement
    (a lead, not worth it, and no read of any kind is pending then): the pass would insert
    nothing. False when unsure (the pass decides)."""
    calls = facts.calls
    for i in range(start, len(body)):
        if type(body[i]) in _BLOCKS:
            return False
    found = []
    for i in range(start, len(body)):
        stmt = body[i]
        t = type(stmt)
        if id(stmt) not in calls:
            continue
        if t is ast.Expr or t is ast.Assign:
            call = stmt.value
        elif (t is ast.AugAssign or t is ast.AnnAssign) and type(stmt.target) is ast.Name:
            call = stmt.value
        else:
            return False
        if type(call) is not ast.Call:
            return False
        if i > start:
            changed = facts.changes(body[i - 1])
            if changed is not None:
                nodes = list(call.args) + [k.value for k in call.keywords]
                while nodes:
                    node = nodes.pop()
                    if type(node) is ast.Name and node.id in changed:
                        break
                    _children(node, nodes)
                else:
                    return False  # the call's arguments could be computed a statement earlier
        found.append((stmt, call))
    # The call must be the statement's only one (nor may it hold a comprehension or lambda).
    for stmt, call in found:
        nodes = [stmt]
        while nodes:
            node = nodes.pop()
            if type(node) in _NOT_PLAIN and node is not call:
                return False
            _children(node, nodes)
    return True


def transform(tree, source, filename, early, namespace):
    """Insert prepares for calls of the early tools (a set of names) into tree, a Module
    parsed from source, and keep the plans they run. Returns the tree to run: tree, or
    a fresh parse of source when the pass failed half-way. namespace is the dict the
    program runs in. A program that mentions the helper's name is left as it is."""
    global _ns
    tools = [t for t in early if t.rpartition(".")[2] in source]
    if not tools or HELPER in source:
        return tree
    try:
        facts = _Facts(tree.body, frozenset(t.rpartition(".")[2] for t in tools))
        if not facts.calls:
            return tree  # no statement the pass looks at calls a tool
        body = tree.body
        start = _module_start(body)
        if start >= len(body) or (not pending and _nothing_to_prepare(body, start, facts)):
            return tree
        bound = facts.bound
        tools = _usable_tools(tools, bound, facts.attrs)
        if not tools:
            return tree
        scanner = _Scanner(tools, bound, source)
        plm = _Pass(scanner, facts, facts.declared, HELPER)
        plm.place(body, start, plm.block(body, start))
        chains = _chains(body, start, plm, facts)
        plm.finish(_spare_calls)
    except Exception:
        # The tree is untouched until the pass has made every statement (finish). It is
        # not parsed again: that would repeat the parser's warnings.
        return tree
    if plm.plans:
        if chains is not None:
            _begin_chains(chains, plm.plans, namespace)
        _plans.update(plm.plans)
        _ns = namespace
        _inserted.extend(plm.inserted)
    return tree


# Chains: reads that wait for other reads' values (plm.chain) ----------------


def _chains(body, start, plm, facts):
    """The whole program's chains, found before the prepares are inserted: (waiting
    candidates, {id(candidate): name} of the candidates that are specs, {name: spec
    candidate}), or None.

    A spec is the call of a module-level statement ``name = tool(...)``, the only statement
    of the module's top level that binds or changes name, in no function's global
    declaration. A waiting candidate is one of a later module-level statement's calls
    whose arguments read specs made before it and, at most, inputs (which no statement
    before it may bind or change), nothing else. When the program reaches it with nothing
    changed, its arguments are what the chain computes from the specs' values."""
    top = {}  # statement number -> index in body, for module-level statements
    for i in range(start, len(body)):
        top[plm.seq[id(body[i])]] = i
    cands = []
    for _, _, cs, _ in plm.places:
        for c in cs:
            if c.home in top:
                cands.append(c)
    if len(cands) < 2:
        return None
    specs = {}  # name -> (index, candidate), None when several statements bind name
    targets = {}
    for c in cands:
        if c.single is None:
            continue
        i = top[c.home]
        stmt = body[i]
        name = spec_target(stmt)
        if name is None or c.node is not stmt.value or name in facts.declared:
            continue
        targets[id(c)] = name
        specs[name] = None if name in specs else (i, c)
    if not specs:
        return None
    waiting = []
    needed = {}
    for c in cands:
        names = c.free & specs.keys()
        if not names or c.free - names - {"inputs"}:
            continue
        at = top[c.home]
        ok = True
        for name in names:
            entry = specs[name]
            if entry is None or entry[0] >= at:
                ok = False
                break
        watched = c.free
        for j in range(start, at) if ok else ():
            changed = facts.changes(body[j])
            if changed is None:
                ok = False
                break
            for name in watched & changed:
                if name == "inputs" or specs[name][0] != j:
                    ok = False
            if not ok:
                break
        if ok:
            waiting.append(c)
            for name in names:
                needed[name] = specs[name][1]
    if not waiting:
        return None
    return waiting, targets, needed


def _begin_chains(chains, plans, namespace):
    """Make the plans of the specs a chain waits for tell plm.chain the handles of their
    reads, and hand it the waiting candidates."""
    waiting, targets, needed = chains
    for name, cand in needed.items():
        key = cand.text()
        plan = plans.get(key)
        if plan is not None:
            plans[key] = _spec_plan(plan, name)
    _key_cache.clear()
    inputs = namespace.get("inputs") if _keys_scalar(namespace) else None
    _key_cache.clear()
    chain.begin(inputs, waiting, targets)


def _spec_plan(plan, name):
    def spec_plan(env, spare=False):
        futures.last_handle = 0
        ok = plan(env, spare)
        if ok is True and futures.last_handle:
            chain.spec(name, futures.last_handle)
        return ok

    return spec_plan


# Materializing: the prepare statements call the helper without looking its name up ----
#
# A name looked up at module level is looked up in the program's globals first: a program
# could bind __spine_prepare there, or plant a key whose hash equals the name's and whose
# __eq__ would run during the lookup. So the module's code object is changed: each
# prepare statement's callee, compiled as __spine_prepare[_MARK] (a name load, a constant
# load and a subscript: at least 14 bytes), becomes a load of the helper itself as a
# constant of the code, padded with NOPs. Offsets, line numbers and exception tables are
# unchanged. A load of the name not followed by the mark is the program's own (transform
# leaves a program that names the helper alone, but an identifier is NFKC-normalized, so
# other characters can spell it): it is left as it is.

_MARK = "\x00spine:helper"
_OP = opcode.opmap
_LOAD_NAME, _LOAD_CONST, _BINARY_SUBSCR = _OP["LOAD_NAME"], _OP["LOAD_CONST"], _OP["BINARY_SUBSCR"]
_EXTENDED_ARG, _NOP = _OP["EXTENDED_ARG"], _OP["NOP"]


def materialize(tree, filename):
    """The code object of tree (a Module) to run: compile(tree, filename, "exec"), with
    the prepare statements transform inserted calling the helper directly; or None when
    there are none, or they cannot run: the prepares are then taken out again and the
    caller compiles tree, as the program wrote it, as it would with early reads off (in
    its own frame, so that the depth the compiler may reach is the same). They cannot run
    when the code is not as _patch expects, or when the tree with them is too deep to
    compile (RecursionError) where the program alone may not be."""
    if not _inserted:
        return None
    calls = []
    for _, stmt in _inserted:
        call = stmt.value
        func = call.func
        calls.append((call, func))
        call.func = ast.Subscript(
            value=func,
            slice=ast.Constant(value=_MARK, lineno=func.lineno, col_offset=func.col_offset,
                               end_lineno=func.end_lineno, end_col_offset=func.end_col_offset),
            ctx=ast.Load(),
            lineno=func.lineno,
            col_offset=func.col_offset,
            end_lineno=func.end_lineno,
            end_col_offset=func.end_col_offset,
        )
    patched = None
    try:
        patched = _patch(compile(tree, filename, "exec"))
    except RecursionError:
        # Converting the tree back to the compiler's raises it before the compiler
        # emits anything, so no warning has been shown twice.
        pass
    finally:
        for call, func in calls:
            call.func = func
    if patched is not None:
        return patched
    for stmts, stmt in _inserted:
        for i, s in enumerate(stmts):
            if s is stmt:
                del stmts[i]
                break
    _inserted.clear()
    _plans.clear()
    return None


def _patch(code):
    """code with every `__spine_prepare[_MARK]` replaced by a load of the helper as a
    constant, or None when the code is not as expected."""
    names = code.co_names
    consts = code.co_consts
    if HELPER not in names:
        return code  # the compiler dropped every prepare (unreachable code)
    name_at = names.index(HELPER)
    mark_at = -1
    for i, c in enumerate(consts):
        if type(c) is str and c == _MARK:
            mark_at = i
            break
    helper_at = len(consts)
    if mark_at < 0 or helper_at > 0xFFFF:
        return None
    co = bytearray(code.co_code)
    n = len(co)
    if name_at < 256:
        # The loads have no EXTENDED_ARG: find them with bytearray.find (every code unit
        # is two bytes, so a match at an odd offset is an argument and an opcode).
        load = bytes((_LOAD_NAME, name_at))
        i = co.find(load)
        while i >= 0:
            if not i & 1 and (i < 2 or co[i - 2] != _EXTENDED_ARG):
                _replace(co, i, i + 2, mark_at, helper_at)
            i = co.find(load, i + 2)
    else:
        i = 0
        start = -1
        ext = 0
        while i < n:
            op, arg = co[i], co[i + 1]
            if op == _EXTENDED_ARG:
                if start < 0:
                    start = i
                ext = (ext | arg) << 8
                i += 2
                continue
            first = i if start < 0 else start
            full = ext | arg
            start, ext = -1, 0
            i += 2
            if op == _LOAD_NAME and full == name_at:
                end = _replace(co, first, i, mark_at, helper_at)
                if end > 0:
                    i = end
    return code.replace(co_code=bytes(co), co_consts=consts + (run_plans,))


def _replace(co, first, i, mark_at, helper_at):
    """If the load of the helper's name spanning co[first:i] is followed by the mark's
    constant and a subscript, make the whole span a load of the helper (at index
    helper_at of the constants) and NOPs; return the span's end, or -1 (the program's own
    load of the name, left alone)."""
    n = len(co)
    e = 0
    while i < n and co[i] == _EXTENDED_ARG:
        e = (e | co[i + 1]) << 8
        i += 2
    if i + 4 > n or co[i] != _LOAD_CONST or (e | co[i + 1]) != mark_at or co[i + 2] != _BINARY_SUBSCR:
        return -1
    end = i + 4 + 2 * _SUBSCR_CACHES
    if end > n:
        return -1
    for j in range(i + 4, end):
        if co[j]:
            return -1  # not the subscript's cache entries
    co[first:end] = bytes((_EXTENDED_ARG, helper_at >> 8, _LOAD_CONST, helper_at & 255)) + bytes(
        (_NOP, 0)
    ) * ((end - first - 4) // 2)
    return end


_SUBSCR_CACHES = opcode._inline_cache_entries[_BINARY_SUBSCR]
