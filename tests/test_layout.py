"""The house holds its shape: functions that fit, arrows one way, no private names borrowed.

A long module that holds one concept is fine (no file-length rule: a concept is split by
concept, not by line count)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
MAX_FUNCTION_LINES = 120


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """``(module, imported name)`` of every ``from workbench... import`` in ``path``, lazy
    imports inside functions included."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("workbench"):
                out += [(module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("workbench")]
    return out


def test_no_function_above_120_lines() -> None:
    big_functions = []
    for name, path in _modules().items():
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    big_functions.append(f"{name}.{node.name}: {lines} lines")
    assert big_functions == []


def test_no_import_circle() -> None:
    modules = _modules()
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for module, imported in _imports(name, path, modules):
            target = f"{module}.{imported}" if f"{module}.{imported}" in modules else module
            if target in modules and target != name:
                deps.add(target)
        edges[name] = deps
    circles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                circles.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    # A package's __init__ importing its own submodules is not a circle between rooms.
    circles = [c for c in circles if not all(m.startswith(c[0] + ".") or m == c[0]
                                             for m in c)]
    assert circles == []


def test_no_module_imports_another_modules_private_name() -> None:
    """A private helper stays in its module; a private submodule (``io._table``) is shared
    only inside its own package."""
    modules = _modules()

    def own_package(name: str, module: str, imported: str) -> bool:
        return f"{module}.{imported}" in modules and name.startswith(module + ".")

    borrowed = [f"{name} imports {module}.{imported}"
                for name, path in modules.items()
                for module, imported in _imports(name, path, modules)
                if imported.startswith("_") and not imported.startswith("__")
                and module != name and not own_package(name, module, imported)]
    assert borrowed == []


def test_unit_conversions_use_the_named_factors() -> None:
    """``/ 1000`` and ``3.6e6`` are written :mod:`workbench.units`'s names (``G_PER_KG``,
    ``W_PER_KW``, ``J_PER_KWH``, ``MS_PER_S``, ``KILO``), not bare numbers."""
    bare = []
    for name, path in _modules().items():
        if name == "workbench.units":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == 3.6e6:
                bare.append(f"{name}:{node.lineno} 3.6e6")
            elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                  and isinstance(node.right, ast.Constant) and node.right.value == 1000):
                bare.append(f"{name}:{node.lineno} / 1000")
    assert bare == []


# -- cohesion: parts, not mixins ------------------------------------------------------------
_INTERFACE_BASES = {"ABC", "Protocol"}
_RECORD_BASES = {"NamedTuple", "TypedDict", "BaseModel"}


def _base_names(cls: ast.ClassDef) -> set[str]:
    """The last dotted part of each base (``Protocol[T]`` -> ``Protocol``) and metaclass."""
    exprs = [*cls.bases, *(k.value for k in cls.keywords if k.arg == "metaclass")]
    return {ast.unparse(e.value if isinstance(e, ast.Subscript) else e).rsplit(".", 1)[-1]
            for e in exprs}


def _is_interface(cls: ast.ClassDef) -> bool:
    """An abstract interface: a class deriving from ``abc.ABC`` or ``typing.Protocol`` (or
    made by ``ABCMeta``)."""
    return bool(_base_names(cls) & (_INTERFACE_BASES | {"ABCMeta"}))


def _is_record(cls: ast.ClassDef) -> bool:
    """A record whose annotations are its fields: a dataclass, NamedTuple, TypedDict or
    pydantic model."""
    decorated = any(ast.unparse(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1]
                    == "dataclass" for d in cls.decorator_list)
    return decorated or bool(_base_names(cls) & _RECORD_BASES)


def _declared_not_assigned(cls: ast.ClassDef) -> list[str]:
    """The attributes ``cls`` declares by a bare annotation (``name: T`` with no value) and
    never assigns (``self.name = ...``) in its own methods: what another class must provide."""
    declared = [s.target.id for s in cls.body
                if isinstance(s, ast.AnnAssign) and s.value is None
                and isinstance(s.target, ast.Name)]
    assigned = set()
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                        and sub.value.id == "self"):
                    assigned.add(sub.attr)
    return [n for n in declared if n not in assigned]


def mixin_declarations(sources: dict[str, str]) -> list[str]:
    """``module.Class: names`` for each class that another class derives from and that
    declares attributes it never assigns (a mixin reading its host's state), unless it is
    an abstract interface or a record."""
    classes = [(mod, node) for mod, text in sources.items()
               for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ClassDef)]
    used_as_base = {b for _, c in classes for b in _base_names(c)}
    out = []
    for mod, cls in classes:
        if cls.name not in used_as_base or _is_interface(cls) or _is_record(cls):
            continue
        names = _declared_not_assigned(cls)
        if names:
            out.append(f"{mod}.{cls.name}: {', '.join(names)}")
    return out


def _raises_not_implemented(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def not_implemented_stubs(sources: dict[str, str]) -> list[str]:
    """``module.function`` for each function that raises NotImplementedError outside an
    abstract interface: neither a method of an ABC or Protocol class nor decorated
    ``@abstractmethod``."""
    out = []
    for mod, text in sources.items():
        tree = ast.parse(text)
        owner = {id(f): c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                 for f in c.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            cls = owner.get(id(fn))
            abstract = any(ast.unparse(d).rsplit(".", 1)[-1] == "abstractmethod"
                           for d in fn.decorator_list)
            if (_raises_not_implemented(fn) and not abstract
                    and not (cls is not None and _is_interface(cls))):
                out.append(f"{mod}.{fn.name}")
    return out


_MIXIN = """
class Pacing:
    caps: object
    def budget(self):
        return self.caps
class Plain:
    count: int
    def __init__(self):
        self.count = 0
class Policy(Pacing, Plain):
    def __init__(self):
        self.caps = None
"""
_INTERFACES = """
import abc
from dataclasses import dataclass
from typing import Protocol
class Facts(Protocol):
    name: str
    def label(self) -> str:
        raise NotImplementedError
class Solver(abc.ABC):
    @abc.abstractmethod
    def solve(self): raise NotImplementedError
@dataclass(frozen=True)
class Record:
    n: int
class Derived(Record, Facts):
    def lookup(self):
        raise NotImplementedError
"""


def test_the_cohesion_checks_tell_a_mixin_from_an_interface() -> None:
    assert mixin_declarations({"m": _MIXIN}) == ["m.Pacing: caps"]
    assert mixin_declarations({"m": _INTERFACES}) == []
    assert not_implemented_stubs({"m": _INTERFACES}) == ["m.lookup"]


def test_no_mixin_declares_another_classs_attributes() -> None:
    """A part owns its state (a record it assigns) and is handed what it needs; a class
    that others derive from declares no attribute for them to provide, unless it is an
    abstract interface."""
    sources = {name: path.read_text() for name, path in _modules().items()}
    assert mixin_declarations(sources) == []


def test_no_not_implemented_stub_outside_an_abstract_interface() -> None:
    sources = {name: path.read_text() for name, path in _modules().items()}
    assert not_implemented_stubs(sources) == []
