"""A vision-language model's explanation of one photo, in files: report.json (the prompt, the
answer, every token's id, text, probability and score, each target's maps), tokens.png (the
strip), one picture per target (``token3.png``), and with ``save_tensors`` tensors.npz, each map
under ``LAYER/METHOD/token3`` (a word of several tokens: ``tokens3-4``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from hookviz.store.files import atomic_write, write_json

__all__ = ["REPORT_KIND", "SCHEMA", "tensor_key", "vlm_report", "write_vlm"]

#: report.json's ``kind`` for a vision-language model's answer.
REPORT_KIND = "vlm"
#: Its schema (hookviz/schemas/vlm_report.schema.json).
SCHEMA = "hookviz/vlm-report/1"


def tensor_key(maps, target) -> str:
    """tensors.npz's key of ``target``'s map by ``maps``: layer, method, token index."""
    return f"{maps.layer}/{maps.method}/{target.key}"


def _map_figures(values: np.ndarray) -> dict:
    flat = np.abs(values)
    where = np.unravel_index(int(np.argmax(flat)), flat.shape)
    return {"min": float(values.min()), "max": float(values.max()), "peak": [int(i) for i in where], "shape": list(values.shape)}


def vlm_report(explanation, image: str, model: str, weights: str, pictures: dict[int, str], tensors: bool) -> dict:
    """report.json's document (``pictures``: each target's picture file, by its index)."""
    talk = explanation.conversation
    tokens = [
        {"index": k, "id": int(talk.answer_ids[k]), "token": talk.tokens[k], "probability": float(explanation.probabilities[k]),
         "score": float(explanation.scores[k])}
        for k in range(len(talk.answer_ids))
    ]  # fmt: skip
    targets = [
        {
            "key": target.key,
            "label": target.label,
            "tokens": list(target.tokens),
            "probability": float(explanation.probabilities[list(target.tokens)].prod()),
            "picture": pictures.get(k),
            "maps": {f"{m.method}@{m.layer}": _map_figures(m.maps[k].numpy()) for m in explanation.maps},
        }
        for k, target in enumerate(explanation.targets)
    ]
    from hookviz import __version__

    return {
        "schema": SCHEMA,
        "hookviz": __version__,
        "kind": REPORT_KIND,
        "image": image,
        "model": model,
        "weights": weights,
        "family": explanation.family,
        "prompt": talk.prompt,
        "text": talk.text,
        "answer": "generated" if talk.generated else "given",
        "objective": explanation.objective,
        "tokens": tokens,
        "targets": targets,
        "maps": [{"method": m.method, "layer": m.layer, "grid": list(m.maps.shape[1:])} for m in explanation.maps],
        "pictures": {"strip": "tokens.png", "tokens": [pictures[k] for k in sorted(pictures)]},
        "tensors": "tensors.npz" if tensors else None,
    }


def write_vlm(explanation, folder: Path, *, image: str, model: str, weights: str, save_tensors: bool = False) -> list[Path]:
    """Every file of ``explanation`` in ``folder``, each written whole or not at all; report.json last."""
    from hookviz.render.vlm import strip_png, token_png

    written = [atomic_write(folder / "tokens.png", strip_png(explanation))]
    pictures = {k: f"{target.key}.png" for k, target in enumerate(explanation.targets)}
    for k, name in pictures.items():
        written.append(atomic_write(folder / name, token_png(explanation, k)))
    if save_tensors:
        arrays = {
            tensor_key(maps, target): maps.maps[k].numpy().astype(np.float32)
            for maps in explanation.maps
            for k, target in enumerate(explanation.targets)
        }
        arrays["answer_ids"] = explanation.conversation.answer_ids.numpy()
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
        written.append(atomic_write(folder / "tensors.npz", buffer.getvalue()))
    document = vlm_report(explanation, image, model, weights, pictures, save_tensors)
    written.append(write_json(folder / "report.json", document))
    return written
