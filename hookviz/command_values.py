"""The command's values coerced without pydantic where typer's answer is plain.

typer (0.29) turns each parameter's value through a pydantic ``TypeAdapter`` it builds on
first use, for every parameter, given or not: ``hookviz run`` has about a hundred (its own and
the settings methods, tasks and sample kinds declare), and that imported pydantic and built an
adapter each, about a fifth of the command's start before its render workers start. For the
values most parameters hold, the adapter's answer is known: nothing (``None``: typer gives
``None``, or ``()`` to a repeated option, before any adapter); a text, whole number or number
for a parameter of that type, returned as it is; a whole number or number for a text
parameter, as ``str`` of it (typer's ``_parse_cli_str``); a list of texts for a repeated text
option, as a list. ``plain_values`` gives those without an adapter. Every other value (a text
given for a number, which may be refused; a choice, a path, a parameter with a parser or a
range) goes through typer's adapter as before: the same values, the same messages.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plain_values"]

_UNSET = object()
_CLASSES: dict[type, type] = {}


def plain_values(params: list) -> list:
    """``params`` (a click command's), each typer parameter given the plain coercion above.
    Nothing changes where typer has no adapters (another version of typer)."""
    from typer.core import TyperArgument, TyperOption

    if not hasattr(TyperOption, "get_runtime_param"):
        return params
    for param in params:
        base = type(param)
        if base in (TyperArgument, TyperOption):
            if base not in _CLASSES:
                _CLASSES[base] = _plain_class(base)
            param.__class__ = _CLASSES[base]
    return params


def plain(param: Any, value: Any) -> Any:
    """What typer's adapter of ``param`` would make of ``value``, or ``_UNSET`` when that needs the adapter."""
    descriptor = getattr(param, "type_descriptor", None)
    info = getattr(descriptor, "parameter_info", None)
    if descriptor is None or info is None or descriptor.file_annotation is not None:
        return _UNSET
    repeated = param.multiple or param.nargs == -1
    if value is None:
        return () if repeated else None
    if info.parser is not None or info.min is not None or info.max is not None or info.clamp:
        return _UNSET
    annotation = descriptor.annotation
    if repeated:
        if annotation == list[str] and isinstance(value, (list, tuple)) and all(type(item) is str for item in value):
            return list(value)
        return _UNSET
    if annotation is str and type(value) in (str, int, float):
        return str(value)
    if annotation in (int, float) and type(value) is annotation:
        return value
    return _UNSET


def _plain_class(base: type) -> type:
    """``base`` (typer's option or argument class) whose ``process_value`` takes ``plain``'s
    values without an adapter, and leaves every other to typer's."""

    def process_value(self: Any, ctx: Any, value: Any) -> Any:
        coerced = plain(self, value)
        if coerced is _UNSET:
            return base.process_value(self, ctx, value)  # type: ignore[attr-defined]
        if self.required and self.value_is_missing(coerced):  # as typer's, after its coercion
            from typer._click.exceptions import MissingParameter

            raise MissingParameter(ctx=ctx, param=self)
        return coerced if self.callback is None else self.callback(ctx, self, coerced)

    return type(f"Plain{base.__name__}", (base,), {"process_value": process_value, "__module__": __name__})
