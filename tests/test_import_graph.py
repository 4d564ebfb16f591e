"""No import circle of more than two modules (issue 26), and the ones left may only shrink.

Rules: every ``import`` / ``from ... import`` in ``broker``, ``controller``, ``dledger``, ``namesrv``, ``tools`` and
``upgrade`` counts, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``): a function-local import hides a circle from Python, not from a reader. A
circle is a strongly connected component of that graph. A circle of more than two modules
fails the test unless it is listed in :data:`KNOWN` with at most the modules listed there;
a listed circle that is gone must be taken off the list (so the list only shrinks).

Session 11 listed three (the broker controller and what it wires, the store's two commitlogs,
the Raft core's role functions); session 12 broke all three with narrow Protocols
(``ProcessorHost``, ``RoleHost``, ``StoreHost``, ``dledger.core.state``), so the list is empty
and must stay so. Two-module circles remain allowed (a module and its helper that types it).
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("broker", "controller", "dledger", "namesrv", "tools", "upgrade")

KNOWN: list[frozenset[str]] = []  # session 12: every circle of more than two modules is gone


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for name in names:
                # the longest prefix that is one of our modules (``from pkg import mod`` names a module)
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != mod and not mod.startswith(name + "."):  # a package's face is no arrow back
                    graph[mod].add(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_function_local_and_type_checking_imports() -> None:
    g = import_graph()
    assert "broker.store.schedule" in g["broker.master_services"]  # a function-local import
    assert "dledger.core.state" in g["dledger.core.replication"]  # under TYPE_CHECKING
    assert "broker.remoting.broker_remoting" not in g["broker.remoting.processors.common"]  # the Protocol instead


def test_no_new_or_larger_import_circle() -> None:
    found = circles(import_graph())
    big = [c for c in found if len(c) > 2]
    unknown = [sorted(c) for c in big if not any(c <= k for k in KNOWN)]
    assert unknown == [], f"import circles of more than two modules: {unknown}"
    gone = [sorted(k) for k in KNOWN if not any(c & k and len(c) > 2 for c in big)]
    assert gone == [], f"these circles are gone: take them off KNOWN (the list only shrinks): {gone}"
