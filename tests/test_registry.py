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
