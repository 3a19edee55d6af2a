"""Options an owner declares: a method, a task or a sample kind says what settings of its own it
takes as one frozen dataclass (its *group*), and everything else is read from that: the
``hookviz run`` flags and their help, ``explain()``'s keywords, the checks of each value, and
what report.json's ``asked`` keeps.

A group is a frozen dataclass whose fields all have defaults; a field's metadata may say more
(``option`` writes it)::

    @dataclass(frozen=True)
    class RolloutOptions:
        discard_ratio: float = option(0.9, help="Share of the weakest attention dropped.", low=0.0, high=1.0)
        head_fusion: str = field(default="mean", metadata={"help": "mean, max or min of the heads."})

    @register_method("rollout", options=RolloutOptions)
    def rollout(ctx): ...  # ctx.settings is the RolloutOptions of the run

The flag is ``--`` and the field's name with ``_`` as ``-`` unless the metadata gives ``flag``;
its ``--help`` panel is the owner's (``Methods`` for a method's) unless it gives ``panel``.
A value given that no owner in use declares (``--steps`` without integrated gradients) is
refused in one line that names who takes it, never silently ignored.

The owners are read from their registries (``OWNERS``: a registry and the attribute that holds
an entry's group), so a kind of owner with options of its own is one more line there.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
import weakref
from dataclasses import MISSING, dataclass
from typing import Any

from hookviz.errors import UsageError, arg, did_you_mean, spell_flag
from hookviz.options.base import ask
from hookviz.registry import registering_built_in

__all__ = [
    "OWNERS",
    "Owner",
    "Setting",
    "option",
    "settings_of",
    "check_values",
    "check_group",
    "given_values",
    "asked_of",
    "owners",
    "groups",
    "takers",
    "build",
    "refuse_given",
]

#: The kinds of owner that declare option groups: (kind, registry module, registry, the
#: attribute of an entry that holds its group or ``None``, the ``--help`` panel of its flags).
OWNERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("method", "hookviz.methods", "METHODS", "options", "Methods"),
    ("task", "hookviz.tasks", "TASKS", "options_type", "Target"),
    ("sample kind", "hookviz.samples", "SAMPLE_KINDS", "options_type", "Images"),
)


_LIMITS = ("choices", "low", "high", "repeat", "keyword", "words")


def option(default: Any = MISSING, *, help: str, flag: str | None = None, panel: str | None = None, **limits: Any) -> Any:
    """A field of a group with what its flag says and checks: ``help``; ``flag`` (default
    ``--name-with-dashes``); ``panel``; ``choices=(...)``; ``low=``/``high=`` (a range, both ends in);
    ``default_factory=`` instead of ``default``; ``repeat=True`` (a tuple, its flag given once per
    item); ``keyword=`` (``explain()``'s keyword, default the field's name); ``words=("auto",)``
    (texts a number setting takes besides numbers: its flag then takes a text, which the group's
    own ``__post_init__`` reads)."""
    factory = limits.pop("default_factory", MISSING)
    unknown = set(limits) - set(_LIMITS)
    if unknown:
        raise UsageError(f"option {help[:30]!r}: unknown {', '.join(sorted(unknown))}; choose from {', '.join(_LIMITS)}")
    metadata = {"help": help, "flag": flag, "panel": panel, **limits}
    if factory is not MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Setting:
    """One field of a group, as its flag and keyword show it.

    Attributes:
        name: the field's name (what messages name, as ``errors.arg`` spells it).
        keyword: ``explain()``'s keyword for it (and the flag's parameter): the name, unless the
            metadata gives ``keyword`` (``target_image`` for ``EmbedOptions.target_images``).
        flag: the command-line flag (``--ig-baseline``).
        help: the flag's help.
        panel: the ``--help`` panel, or ``None`` for the owner's.
        default: the field's default.
        kind: the type of its values: ``bool``, ``int``, ``float``, ``str`` or ``tuple`` (``repeat``).
        choices: the values it takes, or ``()`` for any.
        low, high: its range (both ends in), or ``None``.
        words: texts it takes besides values of ``kind`` (``steps='auto'``), or ``()``.
    """

    name: str
    keyword: str
    flag: str
    help: str
    panel: str | None
    default: Any
    kind: type
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    words: tuple = ()


_SETTINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def settings_of(group: type) -> tuple[Setting, ...]:
    """The settings of ``group`` (a dataclass): its fields that a caller sets (``init`` and ``compare``).
    Read once per group (a dataclass's fields do not change; the command's start asks ~800 times)."""
    if group not in _SETTINGS:
        _SETTINGS[group] = _read_settings(group)
    return _SETTINGS[group]


def _read_settings(group: type) -> tuple[Setting, ...]:
    found = []
    for entry in dataclasses.fields(group):
        if not (entry.init and entry.compare):
            continue
        meta = entry.metadata
        default = entry.default_factory() if entry.default is MISSING else entry.default  # type: ignore[misc,operator]
        kind = tuple if meta.get("repeat") or isinstance(default, (tuple, list)) else type(default)
        keyword = meta.get("keyword") or entry.name
        flag = meta.get("flag") or "--" + keyword.replace("_", "-")
        if meta.get("flag"):
            spell_flag(entry.name, flag)
        help_text = meta.get("help") or f"{group.__name__}.{entry.name}."
        found.append(
            Setting(
                entry.name,
                keyword,
                flag,
                help_text,
                meta.get("panel"),
                default,
                kind,
                tuple(meta.get("choices") or ()),
                meta.get("low"),
                meta.get("high"),
                tuple(meta.get("words") or ()),
            )  # fmt: skip
        )
    return tuple(found)


def _choices(values: tuple) -> str:
    return " or ".join(map(str, values)) if len(values) == 2 else ", ".join(map(str, values))


def check_values(instance) -> None:
    """Raise UsageError, naming the option as the caller spelt it, for a value of ``instance``
    (a group) of another type than its default's, not among its choices, or outside its range."""
    for setting in settings_of(type(instance)):
        value = getattr(instance, setting.name)
        if setting.kind is tuple or setting.default is None:  # None is a value such a setting takes
            continue
        if isinstance(value, str) and value in setting.words:  # a word it takes besides numbers
            continue
        if setting.choices and value not in setting.choices:  # None among them: a choice left out, not a type
            raise UsageError(f"{arg(setting.name, value)}: choose {_choices(setting.choices)}")
        if setting.kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UsageError(f"{arg(setting.name, value)}: give a number")
        if setting.kind is int and not float(value).is_integer():
            raise UsageError(f"{arg(setting.name, value)}: give a whole number")
        if setting.kind is bool and not isinstance(value, bool):
            raise UsageError(f"{arg(setting.name, value)}: give True or False")
        if setting.kind is str and not isinstance(value, str):
            raise UsageError(f"{arg(setting.name, value)}: give a text")
        if setting.choices and value not in setting.choices:
            raise UsageError(f"{arg(setting.name, value)}: choose {_choices(setting.choices)}")
        if setting.low is not None and setting.high is not None and not setting.low <= value <= setting.high:
            raise UsageError(f"{arg(setting.name, value)}: must be from {setting.low} to {setting.high}")
        if setting.kind is float and not math.isfinite(value):
            raise UsageError(f"{arg(setting.name, value)}: give a finite number")


def check_group(group, owner: str) -> None:
    """Raise UsageError when ``group`` (what ``owner``, such as ``method 'rollout'``, declares)
    is not a frozen dataclass whose settings all have defaults, or names a setting that a
    group of another owner, or a run's own options, names too (one flag would mean two things)."""
    if not (isinstance(group, type) and dataclasses.is_dataclass(group) and group.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise UsageError(f"{owner}: options={group!r}; give a frozen dataclass (@dataclass(frozen=True)) of its settings")
    lacking = [f.name for f in dataclasses.fields(group) if f.init and f.default is MISSING and f.default_factory is MISSING]
    if lacking:
        raise UsageError(f"{owner}: {group.__name__}.{lacking[0]} has no default; every setting needs one")
    # A built-in owner is compared with the owners registered so far (each pair of built-ins is
    # compared when the later one registers, so registering the tasks imports no method: a render
    # worker imports the tasks, never the methods); a plug-in's or a caller's with every owner.
    known = groups(registered=registering_built_in())
    taken = {s.name: " and ".join(who) for other, who in known.items() if other is not group for s in settings_of(other)}
    taken |= {name: "the run's own options" for name in ask("run_settings")}
    for setting in settings_of(group):
        if setting.name in taken:
            who = taken[setting.name]
            raise UsageError(f"{owner}: its setting {setting.name!r} is taken by {who}; give it another name")


def asked_of(instance) -> dict:
    """What report.json keeps of a group's values (``asked``, which ``--skip-existing``
    compares): the group's own ``asked()`` where it defines one (values that JSON needs in
    another form: a detection's objective by name, a file by its identity), else each field's
    value (``dataclasses.asdict``)."""
    asked = getattr(type(instance), "asked", None)
    return asked(instance) if callable(asked) else dataclasses.asdict(instance)


def given_values(instance):
    """``(name, value, default)`` of each setting of ``instance`` whose value is not its default."""
    for setting in settings_of(type(instance)):
        value = getattr(instance, setting.name)
        if not _same(value, setting.default):
            yield setting.name, value, setting.default


def _same(value, default) -> bool:
    try:
        return bool(value == default) or (isinstance(value, (tuple, list)) and not value and not default)
    except (TypeError, ValueError, RuntimeError):  # tensors compare element by element
        return False


@dataclass(frozen=True)
class Owner:
    """Who declares a group: ``kind`` (``method``, ``task``, ``sample kind``), its ``name``, the
    ``group`` (a dataclass type) and the ``--help`` ``panel`` of its flags."""

    kind: str
    name: str
    group: type
    panel: str

    @property
    def words(self) -> str:
        return f"{self.kind} {self.name!r}"


def owners(kind: str | None = None, *, registered: bool = False) -> list[Owner]:
    """Every registered owner with a group (of ``kind`` only, when given), in registry order.
    ``registered``: only those registered so far, importing no registry and no built-in
    module (``check_group``'s comparison, made as each owner registers)."""
    found = []
    for owner_kind, module, registry, attribute, panel in OWNERS:
        if kind is not None and owner_kind != kind:
            continue
        if registered:
            entries = getattr(sys.modules.get(module), registry, None)
            items = list(entries.registered().items()) if entries is not None else []
        else:
            items = getattr(importlib.import_module(module), registry).items()
        for name, entry in items:
            group = getattr(entry, attribute, None)
            if group is not None:
                found.append(Owner(owner_kind, name, group, panel))
    return found


def groups(kind: str | None = None, *, registered: bool = False) -> dict[type, tuple[str, ...]]:
    """Each declared group (of ``kind``'s owners, when given), once, with its owners' names
    (``registered``: of the owners registered so far, as ``owners``)."""
    found: dict[type, tuple[str, ...]] = {}
    for owner in owners(kind, registered=registered):
        found[owner.group] = (*found.get(owner.group, ()), owner.name)
    return found


def takers(group: type) -> list[Owner]:
    """The owners that declare ``group``."""
    return [owner for owner in owners() if owner.group is group]


def build(values: dict[str, Any], kind: str | None = None, *, keyword: str = "options") -> tuple:
    """The declared groups (of ``kind``'s owners) made from ``values`` (setting keyword -> value;
    absent ones keep their defaults): one instance per group, each checked.

    Raises:
        UsageError: a name no group declares (``keyword`` names where it was given), or a bad value.
    """
    declared = groups(kind)
    names = {s.keyword for group in groups() for s in settings_of(group)}  # another kind's are theirs to build
    unknown = [name for name in values if name not in names]
    if unknown:
        raise UsageError(f"{arg(unknown[0])}: no {keyword} of that name{did_you_mean(unknown[0], sorted(names))}")
    made = []
    for group in declared:
        given = {s.name: values[s.keyword] for s in settings_of(group) if s.keyword in values}
        instance = group(**given)
        check_values(instance)
        made.append(instance)
    return tuple(made)


def refuse_given(instance, what: str, fix: str) -> None:
    """Raise UsageError for the first setting of ``instance`` given a value of its own, when no
    owner in use declares its group: ``{setting}: only {takers} takes it, and {what}; {fix}``
    (``fix`` may name ``{taker}``, the first owner, and ``{option}``, the option's name)."""
    for name, value, _ in given_values(instance):
        names = [owner.name for owner in takers(type(instance))]
        shown = arg(name, value) if isinstance(value, (str, int, float)) else arg(name)
        if not names:
            raise UsageError(f"{shown}: nothing in use takes it; drop the option")
        raise UsageError(
            f"{shown}: only {' or '.join(names)} takes it, and {what}; {fix.format(taker=names[0], option=arg(name))}"
        )
