"""The facts the pass and prefix mode work from: one walk over a program's statements.

``_Facts`` records every name any scope of the statements binds, every attribute they
assign, every name a ``global`` statement declares, and for each statement outside
function and class bodies what it may rebind or change in place, and whether it calls a
tool. ``_usable_tools`` keeps the early tools the program never rebinds.
"""

import ast
from builtins import (
    any,
    frozenset,
    getattr,
    id,
    isinstance,
    list,
    reversed,
    set,
    tuple,
    type,
)

_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCDEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DYNAMIC = frozenset(("exec", "eval", "globals", "locals", "vars", "setattr", "delattr", "__import__"))
# Methods that do not change their receiver (on the types programs use them with).
_READONLY = frozenset(
    (
        "get keys values items copy count index find rfind startswith endswith lower upper strip "
        "lstrip rstrip split rsplit splitlines join format replace title capitalize casefold "
        "partition rpartition isdigit isalpha isalnum isspace islower isupper isnumeric isdecimal "
        "encode decode removeprefix removesuffix zfill center ljust rjust hex"
    ).split()
)


def _base(node):
    while type(node) is ast.Attribute or type(node) is ast.Subscript:
        node = node.value
    return node.id if type(node) is ast.Name else None


# Fields that never hold nodes (names, operators, flags) or whose nodes have none.
_SCALAR_FIELDS = frozenset(
    "ctx op id attr arg name names asname module level kind conversion is_async simple "
    "type_comment type_ignores rest kwd_attrs".split()
)
_FIELDS = {}


def _node_fields(t):
    if t is ast.Constant or t is ast.MatchSingleton:
        return ()
    return tuple(f for f in t._fields if f not in _SCALAR_FIELDS)


def _children(node, out):
    """Append node's child nodes to out (faster than ast.iter_child_nodes)."""
    t = type(node)
    fields = _FIELDS.get(t)
    if fields is None:
        fields = _FIELDS[t] = _node_fields(t)
    for f in fields:
        v = getattr(node, f, None)
        if v is None:
            continue
        if type(v) is list:
            for x in v:
                if x is not None:
                    out.append(x)
        elif isinstance(v, ast.AST):
            out.append(v)


_NO_EFFECTS = (frozenset(), frozenset(), False)


_STMTS = frozenset(c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.stmt))
_SCOPES = frozenset((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))


class _Facts:
    """One walk over statements: every name any scope of them binds (bound), every
    attribute they assign or delete (attrs), every name a global statement declares
    (declared), and for each statement outside function and class bodies, at any depth,
    its effects: (rebound, mutated, everything) — the names it may bind or delete, the
    names whose objects it may change in place, and whether it may bind any name at all
    (exec, globals(), star imports). calls holds the ids of the statements whose own
    expressions call a name ending in one of leaves (the last parts of tool names)."""

    def __init__(self, stmts, leaves=frozenset()):
        self.bound, self.attrs, self.declared = set(), set(), set()
        self.effects = {}
        self.calls = set()
        self.leaves = leaves
        for stmt in stmts:
            self.statement(stmt)

    def changes(self, stmt):
        """The names stmt may rebind or change, or None for "any name"."""
        rebound, mutated, everything = self.effects.get(id(stmt), _NO_EFFECTS)
        return None if everything else rebound | mutated

    def statement(self, stmt):
        Name, Load, Constant, Call = ast.Name, ast.Load, ast.Constant, ast.Call
        Attribute, Subscript = ast.Attribute, ast.Subscript
        fields_of, AST, stmts, leaves = _FIELDS, ast.AST, _STMTS, self.leaves
        bound, attrs = self.bound, self.attrs
        rebound, mutated = set(), set()
        everything = calls = False
        stack = [(stmt, False)]
        pop, push = stack.pop, stack.append
        while stack:
            node, comp = pop()
            t = type(node)
            if t is Name:
                if type(node.ctx) is not Load:
                    bound.add(node.id)
                    if not comp:
                        rebound.add(node.id)
                continue
            if t is Constant:
                continue
            if t in stmts and node is not stmt:
                r, m, e = self.statement(node)
                rebound |= r
                mutated |= m
                everything = everything or e
                continue
            if t is Call:
                func = node.func
                tf = type(func)
                if tf is Attribute:
                    if func.attr in leaves:
                        calls = True
                    if func.attr not in _READONLY:
                        base = _base(func.value)
                        if base is not None:
                            mutated.add(base)
                elif tf is Name:
                    if func.id in leaves:
                        calls = True
                    elif func.id in _DYNAMIC:
                        everything = True
            elif t is Attribute or t is Subscript:
                if type(node.ctx) is not Load:
                    if t is Attribute:
                        attrs.add(node.attr)
                    base = _base(node)
                    if base is not None:
                        mutated.add(base)
            elif t in _SCOPES:
                if t is not ast.Lambda:
                    bound.add(node.name)
                    rebound.add(node.name)
                # What the statement evaluates: decorators, defaults, bases.
                evaluated = list(getattr(node, "decorator_list", ()))
                if t is ast.ClassDef:
                    evaluated += node.bases
                    evaluated += [k.value for k in node.keywords]
                else:
                    evaluated += node.args.defaults
                    evaluated += [d for d in node.args.kw_defaults if d is not None]
                for e in evaluated:
                    push((e, comp))
                self.scope(node)
                continue
            elif t is ast.NamedExpr:
                bound.add(node.target.id)
                rebound.add(node.target.id)
                push((node.value, comp))
                continue
            elif t is ast.Import or t is ast.ImportFrom:
                for alias in node.names:
                    if alias.name == "*":
                        everything = True
                    else:
                        name = alias.asname or alias.name.partition(".")[0]
                        bound.add(name)
                        rebound.add(name)
                continue
            elif t is ast.ExceptHandler or t is ast.MatchAs or t is ast.MatchStar:
                if node.name:
                    bound.add(node.name)
                    rebound.add(node.name)
            elif t is ast.MatchMapping:
                if node.rest:
                    bound.add(node.rest)
                    rebound.add(node.rest)
            elif t is ast.Global or t is ast.Nonlocal:
                bound.update(node.names)
                if t is ast.Global:
                    self.declared.update(node.names)
                continue
            elif t in _COMPS:
                comp = True
            fields = fields_of.get(t)
            if fields is None:
                fields = _FIELDS[t] = _node_fields(t)
            for f in fields:
                v = getattr(node, f, None)
                if v is None:
                    continue
                if type(v) is list:
                    for x in v:
                        if x is not None:
                            push((x, comp))
                elif isinstance(v, AST):
                    push((v, comp))
        result = (rebound, mutated, everything)
        self.effects[id(stmt)] = result
        if calls:
            self.calls.add(id(stmt))
        return result

    def scope(self, node):
        """Names bound in a function, lambda or class: they count for bound, attrs and declared only."""
        bound, attrs = self.bound, self.attrs
        stack = []
        _children(node, stack)
        while stack:
            n = stack.pop()
            t = type(n)
            if t is ast.Name:
                if type(n.ctx) is not ast.Load:
                    bound.add(n.id)
                continue
            if t is ast.arg:
                bound.add(n.arg)
            elif t is ast.Attribute:
                if type(n.ctx) is not ast.Load:
                    attrs.add(n.attr)
            elif t in _FUNCDEFS or t is ast.ClassDef:
                bound.add(n.name)
            elif t is ast.Import or t is ast.ImportFrom:
                for alias in n.names:
                    bound.add(alias.asname or alias.name.partition(".")[0])
            elif t is ast.ExceptHandler or t is ast.MatchAs or t is ast.MatchStar:
                if n.name:
                    bound.add(n.name)
            elif t is ast.MatchMapping:
                if n.rest:
                    bound.add(n.rest)
            elif t is ast.Global or t is ast.Nonlocal:
                bound.update(n.names)
                if t is ast.Global:
                    self.declared.update(n.names)
                continue
            elif t is ast.NamedExpr:
                bound.add(n.target.id)
            _children(n, stack)


def _dotted(node):
    """"a.b.c" for the expression a.b.c (names only), else None."""
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if type(node) is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _usable_tools(early, bound, attrs):
    """The early tools the code never rebinds (a rebound name makes a prepare useless)."""
    tools = set()
    for name in early:
        segments = name.split(".")
        if segments[0] in bound or any(s in attrs for s in segments[1:]):
            continue
        tools.add(name)
    return tools
