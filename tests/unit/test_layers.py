"""The layers are checked, not hoped for: the import-linter contracts in pyproject.toml hold
(and fail when broken), and no module imports itself through others, TYPE_CHECKING
imports included (import-linter's acyclic_siblings sees packages; this sees modules)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(pythonpath)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def module_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if child < len(edges[node]):
                work.append((node, child + 1))
                nxt = edges[node][child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return cycles


def test_contracts_kept() -> None:
    run = lint_imports(ROOT, ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "broken" not in run.stdout.lower().split("contracts:")[-1].replace("0 broken", "")


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph("groupcoord", exclude_type_checking_imports=False, cache_dir=None)
    assert len(graph.modules) > 100  # the symlinked packages were walked
    assert module_cycles(graph) == []


def test_module_cycles_are_found() -> None:
    graph = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.e", "p.e2")]:
        graph.add_import(importer=a, imported=b)
    graph.add_import(importer="p.e2", imported="p.e")
    assert sorted(module_cycles(graph)) == [["p.a", "p.b", "p.c"], ["p.e", "p.e2"]]


def test_a_broken_contract_fails_lint_imports(tmp_path: Path) -> None:
    """A scratch copy of the packages with one forbidden import added to groups/: the
    'groups/ is pure' contract breaks, and only it."""
    package = tmp_path / "groupcoord"
    package.mkdir()
    shutil.copy(ROOT / "groupcoord" / "__init__.py", package)
    for name in ("coordinator", "protocol", "storage"):
        shutil.copytree(ROOT / name, package / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    result_module = package / "coordinator" / "groups" / "result.py"
    result_module.write_text(
        result_module.read_text() + "\nfrom groupcoord.storage import errors  # noqa\n"
    )
    run = lint_imports(tmp_path, tmp_path)
    assert run.returncode != 0, run.stdout
    assert "7 kept, 1 broken" in run.stdout, run.stdout
    broken = run.stdout.split("Broken contracts")[1]
    assert "groups/ is pure" in broken
    assert "groupcoord.coordinator.groups.result -> groupcoord.storage.errors" in broken
