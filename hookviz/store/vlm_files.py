"""A vision-language model's explanation of one photo, in files: report.json (the prompt, the
answer, every token's id, text, probability and score, each target's maps), tokens.png (the
strip), one picture per target (``token3.png``), the photo as the model saw it (``input.jpg``, what
the explorer lists it by), and with ``save_tensors`` tensors.npz, each map under
``LAYER/METHOD/token3`` (a word of several tokens: ``tokens3-4``); and report.json read back
(``read_vlm_report``) for the explorer."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hookviz.inputs.identity import SampleIdentity
from hookviz.store.documents import read_document, read_int, read_mapping, read_number, read_text
from hookviz.store.files import atomic_write, write_json

__all__ = [
    "PHOTO",
    "REPORT_KIND",
    "SCHEMA",
    "STRIP",
    "VlmReport",
    "VlmTarget",
    "read_vlm_report",
    "tensor_key",
    "vlm_report",
    "write_vlm",
]

#: report.json's ``kind`` for a vision-language model's answer.
REPORT_KIND = "vlm"
#: Its schema (hookviz/schemas/vlm_report.schema.json).
SCHEMA = "hookviz/vlm-report/1"
#: The strip of every target, and the photo as the model saw it.
STRIP, PHOTO = "tokens.png", "input.jpg"


def tensor_key(maps, target) -> str:
    """tensors.npz's key of ``target``'s map by ``maps``: layer, method, token index."""
    return f"{maps.layer}/{maps.method}/{target.key}"


def _map_figures(values: np.ndarray) -> dict:
    flat = np.abs(values)
    where = np.unravel_index(int(np.argmax(flat)), flat.shape)
    return {"min": float(values.min()), "max": float(values.max()), "peak": [int(i) for i in where], "shape": list(values.shape)}


def vlm_report(
    explanation, image: str, model: str, weights: str, pictures: dict[int, str], tensors: bool, made: dict | None = None
) -> dict:
    """report.json's document (``pictures``: each target's picture file, by its index; ``made``:
    the photo's ``sample_identity`` and the run's ``recipe``, which ``--skip-existing`` compares,
    ``runs.vlm_resume``)."""
    talk = explanation.conversation
    tokens = [
        {"index": k, "id": int(talk.answer_ids[k]), "token": talk.tokens[k], "probability": float(explanation.probabilities[k]),
         "score": float(explanation.scores[k]), **({"special": True} if k in talk.special else {})}
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
        "pictures": {"strip": STRIP, "tokens": [pictures[k] for k in sorted(pictures)], "photo": PHOTO},
        "tensors": "tensors.npz" if tensors else None,
        **(made or {}),
    }


def write_vlm(
    explanation, folder: Path, *, image: str, model: str, weights: str, save_tensors: bool = False, made: dict | None = None
) -> list[Path]:
    """Every file of ``explanation`` in ``folder``, each written whole or not at all; report.json
    last (with ``made``: the photo's identity and the run's recipe, ``vlm_report``)."""
    from hookviz.render.vlm import strip_png, token_png

    written = [atomic_write(folder / PHOTO, _jpeg(explanation.photo)), atomic_write(folder / STRIP, strip_png(explanation))]
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
    document = vlm_report(explanation, image, model, weights, pictures, save_tensors, made)
    written.append(write_json(folder / "report.json", document))
    return written


def _jpeg(photo: np.ndarray) -> bytes:
    """``photo`` ((H, W, 3) in [0, 1]) as a JPEG."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray((np.clip(photo, 0, 1) * 255).round().astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


# ----------------------------------------------------------------------------- read back


@dataclass(frozen=True)
class VlmTarget:
    """One target as report.json keeps it: its key (``token3``), its words, its answer tokens,
    their probability together, and its picture (``None``: none was written)."""

    key: str
    label: str
    tokens: tuple[int, ...]
    probability: float | None
    picture: str | None


@dataclass(frozen=True)
class VlmReport:
    """A photo's report.json of a vision-language model's answer, read back (what the explorer
    shows): the photo, the prompt, the answer's text, every answer token's probability, the
    targets, the pictures written (``strip``, ``photo``: ``None`` where a report names none); and
    what ``--skip-existing`` compares (``runs.vlm_resume``): the weights, the layers of its maps,
    its tensors.npz, the photo's ``sample_identity`` and the run's ``recipe`` (``None`` in a
    report of a hookviz before them)."""

    image: str
    model: str | None
    prompt: str
    text: str
    objective: str | None
    probabilities: tuple[float | None, ...]
    targets: tuple[VlmTarget, ...]
    strip: str | None
    photo: str | None
    weights: str | None = None
    layers: tuple[str, ...] = ()
    tensors: str | None = None
    sample_identity: SampleIdentity | None = None
    recipe: dict | None = None

    @property
    def answer_probability(self) -> float | None:
        """The whole answer's probability (its tokens' product), ``None`` where one is unknown."""
        if not self.probabilities or any(p is None for p in self.probabilities):
            return None
        return float(np.prod(np.asarray(self.probabilities, dtype=np.float64)))

    @classmethod
    def from_json(cls, document, source="report.json") -> "VlmReport | None":
        """The report ``document`` holds, or ``None`` when it is no vision-language model's (of this schema)."""
        if not isinstance(document, dict) or document.get("kind") != REPORT_KIND or document.get("schema") != SCHEMA:
            return None
        pictures = read_mapping(document.get("pictures"))
        tokens = [t for t in document.get("tokens") or () if isinstance(t, dict)]
        return cls(
            image=read_text(document.get("image")) or "",
            model=read_text(document.get("model")),
            prompt=read_text(document.get("prompt")) or "",
            text=read_text(document.get("text")) or "",
            objective=read_text(document.get("objective")),
            probabilities=tuple(read_number(t.get("probability")) for t in tokens),
            targets=tuple(t for t in map(_target, document.get("targets") or ()) if t is not None),
            strip=read_text(pictures.get("strip")),
            photo=read_text(pictures.get("photo")),
            weights=read_text(document.get("weights")),
            layers=tuple(
                m["layer"] for m in document.get("maps") or () if isinstance(m, dict) and isinstance(m.get("layer"), str)
            ),
            tensors=read_text(document.get("tensors")),
            sample_identity=SampleIdentity.from_json(document.get("sample_identity")),
            recipe=document["recipe"] if isinstance(document.get("recipe"), dict) else None,
        )


def _target(entry) -> VlmTarget | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
        return None
    tokens = tuple(t for t in map(read_int, entry.get("tokens") or ()) if t is not None)
    return VlmTarget(
        entry["key"],
        read_text(entry.get("label")) or "",
        tokens,
        read_number(entry.get("probability")),
        read_text(entry.get("picture")),
    )


def read_vlm_report(path: Path) -> VlmReport | None:
    """A vision-language model's report.json, or ``None`` when it is missing, unreadable or another kind."""
    return read_document(path, VlmReport)
