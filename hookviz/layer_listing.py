"""``hookviz layers``' listing: a model's modules traced on a blank input of the size it takes,
filtered by path or class, printed as an aligned table."""

from __future__ import annotations

import typer

from hookviz.errors import UsageError

__all__ = ["listed_layers", "print_layers"]


def listed_layers(options, crop: int | None, wanted: str | None, module_type: str | None) -> list:
    """``hookviz layers``' rows: the model's modules traced at ``crop`` (or the size it takes),
    those whose path holds or matches ``wanted`` and whose class is ``module_type``."""
    import fnmatch

    from hookviz.anatomy.layers import list_layers
    from hookviz.models.loading import load_model

    loaded = load_model(options, listing=True)  # a CLIP model's image tower is listed without prompts
    if crop is not None:
        size = (crop, crop)
    else:  # the size the model insists on, else the one its weights expect (a 256-pixel timm ViT)
        processing = loaded.preprocessing  # a transform object's: what it made of its probe photo
        size = loaded.input_size or (processing.trace_size if processing.applies_transform else (processing.size,) * 2)
    rows = list_layers(loaded.module, size, blank=_kind_blank(loaded, size))
    if wanted:
        rows = [r for r in rows if wanted in r.path or fnmatch.fnmatchcase(r.path, wanted)]
    if module_type:
        rows = [r for r in rows if r.module_type == module_type]
    if not rows:
        raise UsageError("no layer matches --filter/--type; run without them to see all")
    return rows


def _kind_blank(loaded, size: tuple[int, int]) -> tuple | None:
    """The blank sample ``hookviz layers`` traces a model of another kind than photos on (a clip
    model's frames: MViT takes 16, no fewer), at ``size``; ``None`` for a photo model."""
    from dataclasses import replace

    from hookviz.samples import get_sample_kind, kind_settings, settings_for_model

    if loaded.sample_kind == "photo":
        return None
    kind = get_sample_kind(loaded.sample_kind)
    settings = settings_for_model(kind, kind_settings(kind, (), loaded.name), loaded)
    return kind.blank(replace(loaded.preprocessing, transform=None, mode="crop", size=size[0], resize=size[0]), settings)


def print_layers(rows: list) -> None:
    width = max(len(r.path) for r in rows)
    type_width = max(len(r.module_type) for r in rows)
    typer.echo(f"{'path':<{width}}  {'type':<{type_width}}  {'output shape':<22}  {'params':>11}  calls")
    for r in rows:
        # in call order, as the layer's :0, :1 ... are numbered; a repeated shape once
        shapes = list(dict.fromkeys("x".join(map(str, s)) if s else "-" for s in r.output_shapes))
        shape = ", ".join(shapes) if shapes else "(not called)"
        typer.echo(f"{r.path:<{width}}  {r.module_type:<{type_width}}  {shape:<22}  {r.parameters:>11,}  {r.calls}")
