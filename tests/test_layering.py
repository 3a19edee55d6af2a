"""The package's layout shows the pipeline's stages, and each stage imports only the stages it
builds on: at module level, every ``hookviz`` import goes down this list (or stays in its
own group). An import inside a function may reach up (``Explanation.save`` draws with
``render`` and writes with ``store``): it runs only when called, so it adds no import cycle,
and it keeps ``import hookviz`` and ``hookviz --help`` light."""

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
    "input_format",
    "options",
    "lazy_dynamo",
    "interrupts",
    "inputs",
    "anatomy",
    "tasks",
    "models",
    "methods",
    "trust",
    "explaining",
    "render",
    "store",
    "compare",
    "runs",
    "plugins",
    "progress",
    "process",
    "command_options",
    "cli",
    "__main__",
]


def _group(module: str) -> str:
    parts = module.split(".")
    return "hookviz" if len(parts) == 1 else parts[1]


def _module_level_imports():
    for path in sorted(HOOKVIZ.rglob("*.py")):
        module = ".".join(path.relative_to(HOOKVIZ.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hookviz"):
                targets = [node.module] if node.module != "hookviz" else [f"hookviz.{a.name}" for a in node.names]
                for target in targets:
                    yield module, target
            elif isinstance(node, ast.Import):
                yield from ((module, a.name) for a in node.names if a.name.startswith("hookviz."))


def test_every_module_belongs_to_a_stage_of_the_order():
    groups = {_group(module) for module, _ in _module_level_imports()} | {
        p.stem if p.is_file() else p.name
        for p in HOOKVIZ.iterdir()
        if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert groups - {"hookviz"} <= set(ORDER), f"place these in ORDER: {sorted(groups - {'hookviz'} - set(ORDER))}"


def test_each_stage_imports_only_the_stages_below_it():
    upward = []
    for module, target in _module_level_imports():
        source, wanted = _group(module), _group(target)
        if wanted in ("hookviz", "__version__") or source == wanted:
            continue
        if ORDER.index(wanted) > ORDER.index(source):
            upward.append(f"{module} imports {target}")
    assert upward == []
