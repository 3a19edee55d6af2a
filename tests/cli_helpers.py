"""The tests' one way to run a ``hookviz`` command in this process (typer's ``CliRunner``):
``hookviz_cli(...)`` for any command, and ``hookviz_run(...)`` for ``hookviz run`` with what most
tests share (the tiny test network with random weights) given once, so that a test spells
only what it is about."""

from __future__ import annotations

from collections.abc import Sequence

from typer.testing import CliRunner, Result

from hookviz.cli import app

__all__ = ["TINY_NET", "hookviz_cli", "hookviz_run"]

#: ``tests.conftest.tiny_net``: five classes, features.0 to features.3, act, pool, fc.
TINY_NET = "tests.conftest:tiny_net"


def hookviz_cli(*args: object, **invoke) -> Result:
    """``hookviz ARGS`` (each argument as a string); ``invoke`` goes to ``CliRunner.invoke``
    (``env``, ``input``, ``catch_exceptions``)."""
    return CliRunner().invoke(app, [str(arg) for arg in args], **invoke)


def hookviz_run(
    images: object | Sequence[object],
    *args: object,
    model: str | None = TINY_NET,
    weights: object | None = "none",
    layer: str | Sequence[str] = (),
    out: object | None = None,
    **invoke,
) -> Result:
    """``hookviz run IMAGES --model MODEL --weights WEIGHTS --layer LAYER... --out OUT ARGS``.

    Args:
        images: one image or folder, or several.
        args: the rest of the command line, as given.
        model, weights: left out when ``None`` (``--model`` is then in ``args``, or the run
            is refused for want of one; ``--weights`` then takes the model's default).
        layer: one ``--layer`` each, in order.
        out: ``--out``, left out when ``None`` (``hookviz-out`` under the working folder).
    """
    images = list(images) if isinstance(images, (list, tuple)) else [images]
    line: list[object] = ["run", *images]
    line += ["--model", model] if model is not None else []
    line += ["--weights", weights] if weights is not None else []
    for name in [layer] if isinstance(layer, str) else layer:
        line += ["--layer", name]
    line += ["--out", out] if out is not None else []
    return hookviz_cli(*line, *args, **invoke)
