"""The package's layout shows the pipeline's stages, and each stage imports only the stages it
builds on: every ``hookviz`` import goes down this list (or stays in its own group). At module
level there is no exception. An import inside a function runs only when called, so it adds no
import cycle at start-up, and it keeps ``import hookviz`` and ``hookviz --help`` light; but one
that reaches up still ties a stage to a later one, so each such tie is one of the few
documented in ``UPWARD_CALLS``, and none is left there unused."""

from __future__ import annotations

import ast
from pathlib import Path

HOOKVIZ = Path(__file__).resolve().parent.parent / "hookviz"

#: Lowest first: a group may import, at module level, only the groups before it.
ORDER = [
    "errors",
    "registry",
    "hooks",
    "budget",
    "workload",
    "modelstate",
    "input_format",
    "options",
    "fonts",
    "lazy_dynamo",
    "interrupts",
    "anatomy",
    "inputs",
    "samples",
    "tasks",
    "models",
    "methods",
    "vlm",
    "trust",
    "explaining",
    "render",
    "store",
    "concepts",
    "compare",
    "runs",
    "atlas",
    "plugins",
    "progress",
    "process",
    "command_errors",
    "command_values",
    "command_options",
    "run_arguments",
    "layer_listing",
    "run_command",
    "cli",
    "__main__",
]


def _group(module: str) -> str:
    parts = module.split(".")
    return "hookviz" if len(parts) == 1 else parts[1]


#: The ties from a function of a stage to a later stage, each for a reason: importing module
#: (or package) -> (the modules it may import in functions, why). At most two. A name an
#: option group checks against a later stage's registry is no such tie: that stage answers it
#: (``hookviz.options.base.ask``), registered in a module its registry imports on first use.
UPWARD_CALLS = {
    "hookviz.explaining.passes": (
        ("hookviz.render", "hookviz.store"),
        "an Explanation draws and saves itself (figure, save, its notebook view), as torch-cam's result does",
    ),
    "hookviz.compare.diffing": (("hookviz.runs.gallery",), "hookviz diff redraws the newer run's gallery with its diff pictures"),
}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _imports():
    """Every ``hookviz`` import: (importing module, imported module, line, inside a function)."""
    for path in sorted(HOOKVIZ.rglob("*.py")):
        module = ".".join(path.relative_to(HOOKVIZ.parent).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_function = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hookviz"):
                targets = [node.module] if node.module != "hookviz" else [f"hookviz.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("hookviz.")]
            else:
                continue
            for target in targets:
                yield module, target, node.lineno, id(node) in in_function


def _module_level_imports():
    return ((module, target) for module, target, _, in_function in _imports() if not in_function)


def _reaches_up(module: str, target: str) -> bool:
    source, wanted = _group(module), _group(target)
    if wanted in ("hookviz", "__version__") or source == wanted:
        return False
    return ORDER.index(wanted) > ORDER.index(source)


def test_every_module_belongs_to_a_stage_of_the_order():
    groups = {_group(module) for module, _ in _module_level_imports()} | {
        p.stem if p.is_file() else p.name
        for p in HOOKVIZ.iterdir()
        if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert groups - {"hookviz"} <= set(ORDER), f"place these in ORDER: {sorted(groups - {'hookviz'} - set(ORDER))}"


def test_each_stage_imports_only_the_stages_below_it():
    upward = [f"{module} imports {target}" for module, target in _module_level_imports() if _reaches_up(module, target)]
    assert upward == []


def test_a_function_reaches_a_later_stage_only_where_documented():
    """Imports inside functions count too: 22 reached a later stage, unseen; those that remain
    are the two ties ``UPWARD_CALLS`` documents, and each of those is still needed."""
    assert len(UPWARD_CALLS) <= 2
    undocumented, used = [], set()
    for module, target, line, in_function in _imports():
        if not (in_function and _reaches_up(module, target)):
            continue
        source = next(
            (s for s in UPWARD_CALLS if _within(module, s) and any(_within(target, t) for t in UPWARD_CALLS[s][0])), None
        )
        if source is None:
            undocumented.append(f"{module}:{line} imports {target}")
        used.add(source)
    assert undocumented == []
    assert set(UPWARD_CALLS) <= used, f"no longer needed: {sorted(set(UPWARD_CALLS) - used)}"


def _cycle(edges: dict[str, set[str]]) -> list[str]:
    """One cycle of ``edges`` (module -> the modules it imports), as its modules in order; ``[]`` for none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(edges):
        if module not in state and (found := visit(module)):
            return found
    return []


def _import_graph() -> dict[str, set[str]]:
    """Module -> the ``hookviz`` modules it imports anywhere (in functions too); ``from
    package import module`` counts as importing that module."""
    modules = {
        ".".join(p.relative_to(HOOKVIZ.parent).with_suffix("").parts).removesuffix(".__init__") for p in HOOKVIZ.rglob("*.py")
    }
    edges: dict[str, set[str]] = {}
    for path in sorted(HOOKVIZ.rglob("*.py")):
        module = ".".join(path.relative_to(HOOKVIZ.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hookviz"):
                named = [f"{node.module}.{a.name}" for a in node.names]
                targets = [t for t in named if t in modules] or [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("hookviz.")]
            else:
                continue
            edges.setdefault(module, set()).update(t for t in targets if t in modules and t != module)
    return edges


def test_no_import_cycle_between_modules():
    """Imports inside functions count: a cycle through one still ties the modules both ways.
    A registry's built-in modules (``hookviz.registry``) and the answers to an option group's
    questions (``hookviz.options.base.ask``) are imported by name, as plug-ins are."""
    assert _cycle(_import_graph()) == []


def test_a_cycle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []
