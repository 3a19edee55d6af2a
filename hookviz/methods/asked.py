"""What a run asks of the methods, checked by this stage, which owns their names: the methods
``TargetOptions.cam`` names, ``--topk`` with them, and the option groups they declare. The
option groups ask it through ``hookviz.options.base.ask``, so the command and ``explain()``
refuse the same values in the same words."""

from __future__ import annotations

from hookviz.errors import UsageError, arg
from hookviz.methods.base import get_method
from hookviz.methods.smoothing import SmoothOptions, smoothable, unsmoothable
from hookviz.options.base import answers
from hookviz.options.declared import check_values, given_values, groups, refuse_given

__all__ = ["asked_methods", "asked_settings", "owners"]


@answers("methods")
def asked_methods(names: tuple[str, ...]) -> list:
    """The methods called ``names``. Raises UsageError for an unknown one."""
    return [get_method(name) for name in names]


@answers("method_settings")
def asked_settings(names: tuple[str, ...], methods: list, topk: int, given) -> tuple:
    """The option groups of ``methods`` (called ``names``), one per group they declare
    (``given``'s, else its defaults), after checking that ``topk`` suits the main one.

    Raises:
        UsageError: ``topk`` above 1 without a class-specific layer method first, or a group
            given that none of them declares.
    """
    if topk > 1:
        _check_topk(topk, ",".join(names) or "none", [m for m in methods if m.resolution == "layer"])
    return _method_settings(given, names, methods)


@answers("owners")
def owners(group: type, names: tuple[str, ...]) -> list[str]:
    """The methods among ``names`` that declare ``group``."""
    return [name for name in names if get_method(name).options is group]


def _method_settings(given, names: tuple[str, ...], methods) -> tuple:
    """One settings group per group the ``methods`` declare, in their order: the one ``given``
    (each checked), else its defaults. A group given that none of them declares would change
    nothing: refused when it holds a value of its own (``--steps`` without integrated
    gradients), whoever registered the methods."""
    given = (given,) if not isinstance(given, (tuple, list)) else tuple(given)
    declared = groups("method")
    for group in given:
        if type(group) not in declared:
            known = ", ".join(g.__name__ for g in declared)
            raise UsageError(f"{arg('settings', type(group).__name__)}: expected a method's option group ({known})")
        check_values(group)
    used = list(dict.fromkeys(m.options for m in methods if m.options is not None))
    used += _smoothing(given, names, methods, used)
    for group in given:
        if type(group) not in used:
            where = f"{arg('cam', ','.join(names) or 'none')} does not include it"
            refuse_given(group, where, "add {taker} to the methods or drop the option")
    twice = [g for g in used if sum(type(h) is g for h in given) > 1]
    if twice:
        raise UsageError(f"{arg('settings')}: {twice[0].__name__} given twice; give it once")
    return tuple(next((h for h in given if type(h) is g), None) or g() for g in used)


def _smoothing(given: tuple, names: tuple[str, ...], methods, used: list) -> list:
    """``[SmoothOptions]`` when one is given with ``--smooth`` and no asked method declares it:
    it wraps the asked gradient methods; refused when none of them is one (``hookviz.methods.smoothing``)."""
    group = next((g for g in given if type(g) is SmoothOptions), None)
    if group is None or SmoothOptions in used and group.smooth == "none":
        return []
    if group.smooth == "none":
        for name, value, _ in given_values(group):
            raise UsageError(
                f"{arg(name, value)}: it sets smoothing, and neither {arg('smooth')} is given nor smoothgradcam++ asked; "
                f"give {arg('smooth', 'smoothgrad')} (or smoothgrad-sq, vargrad) or drop the option"
            )
        return []
    if not any(smoothable(m) for m in methods):
        which = ", ".join(unsmoothable(methods)) or "none"
        raise UsageError(
            f"{arg('smooth', group.smooth)}: it smooths methods that need a gradient, and {arg('cam', ','.join(names) or 'none')} "
            f"has none to smooth ({which}: no gradient, an attention pass, or smoothing of its own); add one (gradcam, "
            "integrated-gradients) or drop the option"
        )
    return [] if SmoothOptions in used else [SmoothOptions]


def _check_topk(topk: int, cam: str, layer_methods) -> None:
    """``--topk`` draws the main (first layer-resolution) method's map of each top class."""
    if not layer_methods:
        raise UsageError(f"{arg('topk', topk)} needs a method that maps a layer; {arg('cam', cam)} has none")
    main = layer_methods[0]
    if not main.class_specific:
        raise UsageError(
            f"{arg('topk', topk)} with {arg('cam', cam)}: {main.name} makes the same map for every class (it uses "
            f"no target), so its top-{topk} maps would be one map {topk} times; drop {arg('topk')} or put a "
            f"class-specific method that maps a layer (gradcam) before {main.name}"
        )
