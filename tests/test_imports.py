"""The arrows run one way: kernels <- engine <- agent <- voice <- benches, training above what it
uses, and no import cycles.

Read from the source with `ast` (nothing is imported): every `import` of a diffvoice module, at
module level or inside a function (an import inside a function still runs, so it cannot hide a
cycle), except those under `if TYPE_CHECKING:`. Rules:
- engine/ and kernels/ import nothing of the agent, voice or the benches; kernels/ nothing of
  engine/;
- no serving module (voice/, agent/ but agent/train/) imports a training module (engine/train/,
  agent/train/);
- agent/ (but agent/train/) imports nothing of voice/ or the benches; voice/ nothing of the
  benches;
- no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "engine", "agent", "voice", "latency_bench")
TRAINING = (("engine", "train"), ("agent", "train"))


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(["diffvoice", *parts])] = path
    return out


MODULES = _modules()


def _module_of(name: str) -> str | None:
    """The diffvoice module an imported name lives in (its longest known prefix)."""
    parts = name.split(".")
    for n in range(len(parts), 1, -1):
        if ".".join(parts[:n]) in MODULES:
            return ".".join(parts[:n])
    return None


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported diffvoice module, line) of every import that runs."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # not run: only for type checkers
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in child.names:  # `from pkg import module` names a module
                    full = f"{base}.{a.name}"
                    found.append((full if full in MODULES else base, child.lineno))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    edges = []
    for name, line in found:
        target = _module_of(name)
        if target is not None and target != module:
            edges.append((target, line))
    return edges


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _where(module: str) -> tuple[str, bool]:
    """(top package, is it training)."""
    parts = module.split(".")
    return parts[1], tuple(parts[1:3]) in TRAINING


def _breaks(module: str, target: str) -> str | None:
    (src, src_training), (dst, dst_training) = _where(module), _where(target)
    if src in ("engine", "kernels") and dst in ("agent", "voice", "latency_bench"):
        return "the engine and the kernels know no agent, voice or bench"
    if src == "kernels" and dst == "engine":
        return "kernels <- engine, not the other way"
    if src in ("voice", "agent") and not src_training and dst_training:
        return "a serving module imports a training module"
    if src == "agent" and not src_training and dst in ("voice", "latency_bench"):
        return "agent <- voice <- benches, not the other way"
    if src == "voice" and dst == "latency_bench":
        return "voice <- benches, not the other way"
    return None


def test_the_graph_is_read():
    # guards the reader itself: known edges of each kind are seen
    assert any(t == "diffvoice.engine.pass_plan" for t, _ in GRAPH["diffvoice.engine.runner"])
    assert any(t.startswith("diffvoice.agent.") for t, _ in GRAPH["diffvoice.voice.pipeline"])
    assert any(t == "diffvoice.agent.train.evaluate"
               for t, _ in GRAPH["diffvoice.agent.train.verify_bank"])
    assert len(MODULES) > 150


def test_each_rule_catches_its_breach():
    assert _breaks("diffvoice.engine.engine", "diffvoice.agent.paraphrase")
    assert _breaks("diffvoice.kernels.ops", "diffvoice.engine.model")
    assert _breaks("diffvoice.voice.pipeline", "diffvoice.agent.train.evaluate")
    assert _breaks("diffvoice.agent.guard", "diffvoice.engine.train.objective")
    assert _breaks("diffvoice.agent.tools", "diffvoice.voice.config")
    assert _breaks("diffvoice.voice.server", "diffvoice.latency_bench.load")
    assert _breaks("diffvoice.agent.train.evaluate", "diffvoice.voice.asr.resolve") is None
    assert _breaks("diffvoice.voice.pipeline", "diffvoice.agent.guard") is None


def test_imports_run_one_way():
    broken = [f"{m.removeprefix('diffvoice.')}:{line} -> {t.removeprefix('diffvoice.')} ({why})"
              for m, edges in GRAPH.items() for t, line in edges
              if (why := _breaks(m, t)) is not None]
    assert not broken, "\n".join(broken)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, iter(GRAPH[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for target, _ in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(GRAPH[target])))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_cycles():
    assert _cycles() == []


def test_a_cycle_would_be_found():
    saved = GRAPH["diffvoice.engine.rope"]
    GRAPH["diffvoice.engine.rope"] = saved + [("diffvoice.engine.model", 1)]
    try:  # model imports rope; rope importing model closes a loop
        assert ["diffvoice.engine.model", "diffvoice.engine.rope"] in _cycles()
    finally:
        GRAPH["diffvoice.engine.rope"] = saved
