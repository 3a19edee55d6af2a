from __future__ import annotations

import pytest

from hookviz.errors import UsageError, did_you_mean
from hookviz.registry import Registry


def test_registry_lookup_and_suggestions():
    registry: Registry = Registry("thing", "thing", extra_choices=("none",))

    @registry.register("alpha")
    def alpha():
        return 1

    assert registry.get("alpha") is alpha and registry.names() == ["alpha"]
    with pytest.raises(UsageError) as error:
        registry.get("alpah")
    assert str(error.value) == "thing='alpah': unknown thing (did you mean 'alpha'?); choose from alpha, none"
    from hookviz.errors import command_line_spelling

    with command_line_spelling(), pytest.raises(UsageError) as error:
        registry.get("alpah")
    assert str(error.value).startswith("--thing alpah: unknown thing")


def test_did_you_mean_falls_back_to_substrings():
    assert did_you_mean("cat", ["tabby cat", "dog"]) == " (did you mean 'tabby cat'?)"
    assert did_you_mean("zzz", ["a", "b"]) == ""


def test_did_you_mean_ranks_whole_words_then_substrings_then_spelling():
    choices = ["crate", "polecat", "tiger cat", "castle", "Egyptian_cat", "cat5"]
    assert did_you_mean("cat", choices, n=5) == " (did you mean 'tiger cat', 'Egyptian_cat', 'cat5', 'polecat', 'crate'?)"
    assert did_you_mean("cat", choices, n=1) == " (did you mean 'tiger cat'?)"


def test_tasks_methods_picture_kinds_and_model_sources_are_one_kind_of_registry():
    """One class behaves alike for every registry: a taken name is refused in the same words,
    lists come in one order, and an unknown name gets a did-you-mean."""
    from hookviz.explaining.checks import CHECKS
    from hookviz.methods import METHODS
    from hookviz.models.sources import SOURCES
    from hookviz.registry import Registry
    from hookviz.render.kinds import KINDS
    from hookviz.samples import SAMPLE_KINDS, get_sample_kind
    from hookviz.tasks import TASKS

    get_sample_kind("photo")  # registers the built-in kind
    for registry in (TASKS, METHODS, KINDS, SOURCES, CHECKS, SAMPLE_KINDS):
        assert type(registry) is Registry
        name = registry.names()[0]
        with pytest.raises(UsageError, match=f"a {registry.what} named '{name}' is already registered"):
            registry.add(name, registry.get(name))
    assert [source.priority for source in SOURCES.values()] == sorted(source.priority for source in SOURCES.values())
    assert [task.priority for task in TASKS.values()] == sorted(task.priority for task in TASKS.values())
    with pytest.raises(UsageError, match=r"unknown task \(did you mean 'classify'"):
        TASKS.get("clasify")


def _package(root, modules):
    """A package ``regpkg`` in ``root``: ``base`` holds a registry of ``modules``, and each of
    them registers its own name."""
    package = root / "regpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    names = " ".join(modules)
    (package / "base.py").write_text(
        f"from hookviz.registry import Registry, built_in\nTHINGS = Registry('thing', 'thing', modules=built_in('regpkg', {names!r}))\n"
    )
    for name in modules:
        (package / f"{name}.py").write_text(f"from regpkg.base import THINGS\nTHINGS.add({name!r}, {name!r})\n")


@pytest.fixture
def regpkg(tmp_path, monkeypatch):
    import sys

    _package(tmp_path, ("b_first", "a_second", "c_third"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [name for name in sys.modules if name == "regpkg" or name.startswith("regpkg.")]:
        del sys.modules[name]


def test_a_registry_imports_its_built_in_modules_on_first_use_in_their_order(regpkg):
    import importlib

    importlib.import_module("regpkg.c_third")  # a built-in module imported first keeps its place
    things = importlib.import_module("regpkg.base").THINGS
    assert things.names() == ["b_first", "a_second", "c_third"]


def test_a_plug_in_registered_before_the_first_read_comes_after_the_built_ins(regpkg):
    import importlib

    things = importlib.import_module("regpkg.base").THINGS
    things.add("mine", "mine")
    assert things.names() == ["b_first", "a_second", "c_third", "mine"]
    with pytest.raises(UsageError, match="a thing named 'a_second' is already registered"):
        things.add("a_second", "shadow")  # the plug-in is refused, not the built-in


def test_no_package_imports_its_modules_for_their_registration():
    """Built-ins register as plug-ins do: their registry imports them, so nothing imports a
    module only to fill a registry, or adds an entry past its decorator."""
    import re
    from pathlib import Path

    import hookviz

    found = []
    for path in Path(hookviz.__file__).parent.rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "isort: skip" in line or "E402" in line or re.match(r"[A-Z_]+\.add\(", line):
                found.append(f"{path.name}:{number}")
    assert found == []


def test_a_task_whose_setting_another_owner_takes_is_refused():
    from dataclasses import dataclass

    from hookviz.tasks import TASKS, TaskBase, register_task

    @dataclass(frozen=True)
    class Counted:
        steps: int = 3

    class Counting(TaskBase):
        name = "counting"
        options_type = Counted

    before = TASKS.snapshot()
    try:
        with pytest.raises(UsageError, match="task 'counting': its setting 'steps' is taken by integrated-gradients"):
            register_task(Counting)
        assert "counting" not in TASKS
    finally:
        TASKS.restore(before)


def test_every_built_in_option_group_names_settings_no_other_owner_takes():
    """A built-in's decorator checks its group against what is registered so far; here every
    group is checked against all of them."""
    from hookviz.options.declared import check_group, groups

    found = groups()
    assert {"integrated-gradients", "detect", "video", "multi"} <= {name for names in found.values() for name in names}
    for group, names in found.items():
        check_group(group, f"owner {names[0]!r}")


def test_registering_the_tasks_imports_no_method():
    """A render worker unpickles a task's prediction, so it imports the tasks; their checks at
    registration compare with the owners registered so far, and import none of the 40 method
    modules (a plug-in's task is still compared with every owner: the test above)."""
    import subprocess
    import sys

    code = (
        "import sys, hookviz.tasks as t; t.TASKS.names(); print('hookviz.methods.scorecam' in sys.modules); "
        "from hookviz.methods import METHODS; METHODS.names(); print('hookviz.methods.scorecam' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.split() == ["False", "True"]  # after the tasks, none; after the methods' registry, all
