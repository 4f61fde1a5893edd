"""Check that `engine/`'s folders are its layers: `python -m pagoda.engine.tools.layering`.

The engine is layered top to bottom as LAYERS lists (the README's "where things live"
table draws the same picture). Three rules, read from the source with `ast` (nothing is
imported):

1. no import cycle, whether the imports run at module level or inside functions (an
   import deferred into a function to dodge a cycle still couples both ends); only
   `if TYPE_CHECKING:` imports, which never run, are left out;
2. `core/`, the scheduler and its bookkeeping, imports none of PURE_CORE_FORBIDDEN, not
   even through the engine modules it imports: it works on integers and is tested alone;
3. an import that points up the layers (anywhere in a file) carries a comment starting
   with `# layering:` that says why, on its line or the line above; every such import is
   listed in the report with its reason.

Exit 0 and a report when the rules hold, 1 and the violations otherwise.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1]
PACKAGE = "pagoda.engine"

# Top to bottom; a module may import its own layer or any below it. The name is the
# first part of the module path under pagoda.engine (a package or a top-level module).
LAYERS: list[tuple[str, ...]] = [
    ("cli", "benchmarks", "tools"),  # the `pagoda` subcommands and what only they use
    ("entrypoints",),  # HTTP: the OpenAI server
    ("__init__",),  # the public API: LLM, AsyncLLM, SamplingParams
    ("frontend",),  # LLM, LLMEngine, AsyncLLM
    ("processing",),  # tokenize, check, detokenize, stop strings
    ("engine_core",),  # the step loop and its clients (a thread, or a process over ZeroMQ)
    ("core", "executor"),  # the pure scheduler; the ranks' runners
    ("runner",),  # every tensor: inputs, CUDA graphs, sampling
    ("structured_output",),  # grammars over the vocabulary: what each row may sample
    ("loader",),  # checkpoints into a built model
    ("models",),
    ("layers",),
    ("kernels",),  # Triton kernels, their torch references and the kernel plan
    ("distributed",),  # tensor-parallel groups and collectives
    # Leaves: import nothing above them.
    (
        "config",
        "engine_flags",
        "lora_request",
        "messages",
        "model_config",
        "outputs",
        "process_lifetime",
        "quantization",
        "sampling_params",
    ),
]

PURE_CORE = "core"
PURE_CORE_FORBIDDEN = ("torch", "numpy", "zmq", "msgspec", "multiprocessing", "threading")
REASON_TAG = "# layering:"


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "runner.model_runner"
    target: str  # imported engine module, or a third-party top-level name
    line: int
    kind: str  # "module" (runs on import), "function" (runs when called) or "typing"
    reason: str | None  # the `# layering:` comment, if any


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    head = module.split(".")[0]
    for rank, names in enumerate(LAYERS):
        if head in names:
            return len(LAYERS) - rank  # higher is further up
    raise KeyError(f"{module} is in no layer: add {head!r} to LAYERS in {__file__}")


def engine_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ENGINE.rglob("*.py"))}


def read_imports(module: str, path: Path, known: set[str]) -> list[Import]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source, str(path))
    found: list[Import] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node, kind in _walk(tree):
        for target in _targets(node, package, known):
            found.append(Import(module, target, node.lineno, kind, _reason(lines, node.lineno)))
    return found


def _walk(tree: ast.Module):
    """Every import node, with when it runs (its `kind`)."""

    def visit(node: ast.AST, kind: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, kind
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                yield from visit(child, "typing")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, "function" if kind == "module" else kind)
            else:
                yield from visit(child, kind)

    yield from visit(tree, "module")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [_resolve(alias.name, known) for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importing module's package
        parent = package.split(".") if package else []
        parent = parent[: len(parent) - (node.level - 1)]
        base = ".".join([*parent, base] if base else parent)
        base = f"{PACKAGE}.{base}" if base else PACKAGE
    targets = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        internal = _strip(submodule)
        targets.append(_resolve(submodule if internal in known else base, known))
    return targets


def _strip(name: str) -> str | None:
    if name == PACKAGE:
        return "__init__"
    if name.startswith(PACKAGE + "."):
        return name[len(PACKAGE) + 1 :]
    return None


def _resolve(name: str, known: set[str]) -> str:
    """An engine module's short name, or the top-level name of anything else."""
    internal = _strip(name)
    if internal is None:
        return name.split(".")[0]
    while internal not in known and "." in internal:
        internal = internal.rpartition(".")[0]
    return internal


def _reason(lines: list[str], lineno: int) -> str | None:
    """The `# layering:` comment on the import's line or in the comment block above it."""
    if REASON_TAG in lines[lineno - 1]:
        return lines[lineno - 1].split(REASON_TAG, 1)[1].strip()
    block = []
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        block.insert(0, lines[index].strip().lstrip("#").strip())
        index -= 1
    text = " ".join(block)
    tag = REASON_TAG.lstrip("#").strip()
    return text.split(tag, 1)[1].strip() if tag in text else None


@dataclass
class Report:
    cycles: list[list[str]]
    impure_core: list[str]
    unexplained_upward: list[Import]
    explained_upward: list[Import]

    @property
    def ok(self) -> bool:
        return not (self.cycles or self.impure_core or self.unexplained_upward)

    def lines(self) -> list[str]:
        out = []
        for cycle in self.cycles:
            out.append("import cycle: " + " -> ".join(cycle))
        out.extend(self.impure_core)
        for imp in self.unexplained_upward:
            out.append(
                f"upward import without a `{REASON_TAG}` reason: {imp.source} -> {imp.target} "
                f"(engine/{imp.source.replace('.', '/')}.py:{imp.line})"
            )
        out.append(f"{len(self.explained_upward)} upward imports, each with its reason:")
        for imp in self.explained_upward:
            out.append(f"  {imp.source} -> {imp.target}: {imp.reason}")
        return out


def check() -> Report:
    modules = engine_modules()
    known = set(modules)
    imports = [imp for name, path in modules.items() for imp in read_imports(name, path, known)]
    internal = [imp for imp in imports if imp.target in known and imp.target != imp.source]
    upward = [imp for imp in internal if layer_of(imp.target) > layer_of(imp.source)]
    return Report(
        cycles=find_cycles(internal),
        impure_core=_impure_core(imports, known),
        unexplained_upward=[imp for imp in upward if not imp.reason],
        explained_upward=[imp for imp in upward if imp.reason],
    )


def find_cycles(imports: list[Import]) -> list[list[str]]:
    """Cycles of imports that run, each reported once (Tarjan's strongly connected
    components, then one shortest cycle through each component's first module)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.kind != "typing":
            graph.setdefault(imp.source, set()).add(imp.target)
    cycles = []
    for component in _components(graph):
        if len(component) > 1:
            cycles.append(_cycle_through(sorted(component)[0], graph, component))
    return cycles


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            found.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _cycle_through(start: str, graph: dict[str, set[str]], within: set[str]) -> list[str]:
    """Breadth-first from start back to start, inside one component."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    return [*paths[node], start]
                if nxt in within and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return [start]


def _impure_core(imports: list[Import], known: set[str]) -> list[str]:
    """Forbidden imports of core/, direct or through the engine modules it imports at
    module level."""
    by_source: dict[str, list[Import]] = {}
    for imp in imports:
        by_source.setdefault(imp.source, []).append(imp)
    problems = []
    for module in sorted(m for m in known if m.split(".")[0] == PURE_CORE):
        seen, chain = _closure(module, by_source, known)
        for name in sorted(seen):
            for imp in by_source.get(name, []):
                if imp.target in PURE_CORE_FORBIDDEN:
                    via = " -> ".join(chain[name])
                    problems.append(f"core imports {imp.target}: {via} (line {imp.line})")
    return sorted(set(problems))


def _closure(start: str, by_source: dict[str, list[Import]], known: set[str]):
    """Engine modules reachable from `start` (all of its imports, the others' module-level
    ones), with the chain that reaches each."""
    chain = {start: [start]}
    todo = [start]
    while todo:
        name = todo.pop()
        for imp in by_source.get(name, []):
            follows = imp.kind == "module" or (name == start and imp.kind == "function")
            if follows and imp.target in known and imp.target not in chain:
                chain[imp.target] = [*chain[name], imp.target]
                todo.append(imp.target)
    return set(chain), chain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    report = check()
    print("\n".join(report.lines()))
    print("layering: ok" if report.ok else "layering: FAILED", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
