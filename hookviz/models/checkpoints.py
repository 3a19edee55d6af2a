"""Checkpoints: read a state_dict from a file without running any code, and load it.

``torch.load`` is always called with ``weights_only=True``, so a pickle that would
execute code is refused before anything runs. ``.safetensors`` files are read with
safetensors. The usual wrappers are undone: ``{"state_dict": ...}`` (Lightning),
``{"model": ...}``, ``{"ema": ...}``, or any one entry that holds the tensors; and when
every key shares a prefix the model lacks (``module.`` of DataParallel, ``_orig_mod.`` of
torch.compile, ``model.`` of a Lightning module's attribute) and the keys fit without it,
it is stripped. Whatever was undone is said in a note. What torch's own ``load_state_dict``
accepts is accepted too: BatchNorm's ``num_batches_tracked``, which files saved before
PyTorch 0.4.1 (or converted from another framework) lack, keeps the model's value.
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

from hookviz.errors import WeightsError, arg, display_path, first_line

__all__ = ["Checkpoint", "LoadedWeights", "read_checkpoint", "read_state_dict", "load_into"]

#: Entries of a checkpoint dict that hold the model's tensors, in order of preference: the
#: trained weights before their moving average (EMA), as the training loop saved them.
_WRAPPER_KEYS = (
    "state_dict",
    "model",
    "model_state_dict",
    "net",
    "weights",
    "ema",
    "model_ema",
    "state_dict_ema",
    "ema_state_dict",
)
_PREFIXES = ("module.", "_orig_mod.")
#: A buffer torch's BatchNorm fills in itself when a state_dict lacks it (PyTorch < 0.4.1).
_OPTIONAL = "num_batches_tracked"


@dataclass(frozen=True)
class Checkpoint:
    """The tensors of a weights file, and where in the file they were found.

    Attributes:
        tensors: ``{name: tensor}``, the keys as the file has them.
        top_keys: the file's top-level keys when it is a dict of more than tensors.
        entry: the entry the tensors were read from (``state_dict``, ``ema``), or ``None``.
        notes: what a report should say about it (an entry chosen among several).
    """

    path: Path
    tensors: dict
    top_keys: tuple[str, ...] = ()
    entry: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadedWeights:
    """A weights file loaded into a model: ``label`` for reports, ``sha256`` of the file's
    bytes (what ``--skip-existing`` compares), and notes on what was undone to fit it."""

    label: str
    sha256: str | None
    notes: tuple[str, ...] = ()


def read_state_dict(path: Path) -> dict:
    """Return the tensors stored in ``path`` as a flat ``{name: tensor}`` dict, without the
    ``module.`` and ``_orig_mod.`` prefixes.

    Raises:
        WeightsError: missing file, not a checkpoint, or a pickle that is not plain tensors.
    """
    tensors = read_checkpoint(path).tensors
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            if all(k.startswith(prefix) for k in tensors):
                tensors, stripped = {k[len(prefix) :]: v for k, v in tensors.items()}, True
    return tensors


def read_checkpoint(path: Path) -> Checkpoint:
    """Read the tensors stored in ``path`` and where in the file they were (keys as stored).

    Raises:
        WeightsError: missing file, not a checkpoint, or a pickle that is not plain tensors.
    """
    import torch

    if not path.exists():
        raise WeightsError(f"{arg('weights', display_path(path))}: no such file")
    if path.is_dir():
        raise WeightsError(f"{arg('weights', display_path(path))}: is a directory; pass the checkpoint file inside it")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            tensors = load_file(str(path), device="cpu")
        except (SafetensorError, Exception) as exc:  # a file that is not safetensors, or is cut short
            raise WeightsError(
                f"{arg('weights', display_path(path))}: not a readable safetensors file ({first_line(exc)})"
            ) from None
        return _unwrap(tensors, path)
    try:
        with warnings.catch_warnings():  # torch's own notes on the pickle ("Detected pickle protocol") are noise here
            warnings.simplefilter("ignore")
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if _looks_saved(path) and ("Weights only load failed" in str(exc) or "Unsupported" in str(exc)):
            raise WeightsError(
                f"{arg('weights', display_path(path))}: refused: the file holds pickled Python objects that could run code "
                "when loaded, so it was not loaded (weights_only=True) and nothing ran; "
                "re-save it with torch.save(model.state_dict(), path) or as .safetensors"
            ) from None
        raise WeightsError(f"{arg('weights', display_path(path))}: not a PyTorch checkpoint ({first_line(exc)})") from None
    except Exception as exc:  # torch.load raises many kinds on a file that is not a checkpoint
        raise WeightsError(f"{arg('weights', display_path(path))}: not a PyTorch checkpoint ({first_line(exc)})") from None
    return _unwrap(obj, path)


def _looks_saved(path: Path) -> bool:
    """Whether a file starts as torch.save writes (a zip archive, or a pickle's protocol
    opcode): only then is a refused load a refused pickle, not a file of something else."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(4)
    except OSError:
        return False
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def _unwrap(obj, path: Path) -> Checkpoint:
    import torch

    top_keys: tuple[str, ...] = ()
    entries: list[str] = []
    notes: list[str] = []
    for _ in range(3):
        if not isinstance(obj, dict) or any(isinstance(v, torch.Tensor) for v in obj.values()):
            break
        top_keys = top_keys or tuple(str(k) for k in obj)
        key, note = _entry(obj, path)
        if key is None:
            break
        entries.append(str(key))
        notes += [note] if note else []
        obj = obj[key]
    if not isinstance(obj, dict) or not obj:
        raise WeightsError(
            f"{arg('weights', display_path(path))}: holds a {type(obj).__name__}, not a state_dict; "
            "save one with torch.save(model.state_dict(), path)"
        )
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise WeightsError(
            f"{arg('weights', display_path(path))}: holds no tensors{_under(entries)}; its top-level keys: "
            f"{', '.join(top_keys[:8]) or 'none'}; save the model's with torch.save(model.state_dict(), path)"
        )
    return Checkpoint(path, tensors, top_keys, ".".join(entries) or None, tuple(notes))


def _entry(obj: dict, path: Path) -> tuple[object, str | None]:
    """The entry of a checkpoint dict that holds the state_dict, and a note when others
    could have: one of the usual names, else the only entry that is a dict of tensors."""
    import torch

    holding = [k for k, v in obj.items() if isinstance(v, dict) and v]
    known = [k for k in _WRAPPER_KEYS if k in holding]
    if known:
        note = (
            (
                f"{arg('weights', display_path(path))}: read its {known[0]!r} entry; "
                f"it also holds {', '.join(map(repr, known[1:]))}"
            )
            if len(known) > 1
            else None
        )
        return known[0], note
    with_tensors = [k for k in holding if any(isinstance(v, torch.Tensor) for v in obj[k].values())]
    if len(with_tensors) == 1:
        return with_tensors[
            0
        ], f"{arg('weights', display_path(path))}: read its {with_tensors[0]!r} entry, the only one that holds tensors"
    return None, None


def _under(entries: list[str]) -> str:
    return f" under {'.'.join(entries)!r}" if entries else " at its top level"


def load_into(model, path: Path) -> LoadedWeights:
    """Load the state_dict in ``path`` into ``model``, strictly (as torch does, see the module).

    Returns:
        The label, the file's SHA-256 and the notes for reports.

    Raises:
        WeightsError: the keys or shapes do not fit; the message names them.
    """
    from hookviz.inputs.identity import file_sha256

    checkpoint = read_checkpoint(path)
    expected = model.state_dict()
    state, notes = _fitted(checkpoint, expected, model)
    wrong = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if wrong:
        raise WeightsError(
            f"{arg('weights', display_path(path))}: shapes do not fit the model ({len(wrong)} tensors: {'; '.join(wrong[:3])}); "
            "was it trained with another number of classes?"
        )
    for key in expected:
        state.setdefault(key, expected[key])  # num_batches_tracked only (``_fitted`` checked)
    model.load_state_dict(state, strict=True)
    try:
        sha256 = file_sha256(path)
    except OSError as exc:
        raise WeightsError(f"{arg('weights', display_path(path))}: cannot be read again ({first_line(exc)})") from None
    return LoadedWeights(str(path), sha256, checkpoint.notes + notes)


def _fitted(checkpoint: Checkpoint, expected: dict, model) -> tuple[dict, tuple[str, ...]]:
    """The checkpoint's tensors under the model's keys: as stored, or without the prefix every
    key shares, when the keys then fit.

    Raises:
        WeightsError: they fit neither way; names the keys, the prefix and the file's top-level keys.
    """
    state = checkpoint.tensors
    if _fits(state, expected):
        return dict(state), ()
    for prefix in _shared_prefixes(state):
        stripped = {k[len(prefix) :]: v for k, v in state.items()}
        if _fits(stripped, expected):
            return stripped, (
                f"{arg('weights', display_path(checkpoint.path))}: every key began with {prefix!r}, "
                f"which {type(model).__name__}'s keys lack; stripped it",
            )
    missing = [k for k in expected if k not in state and not _optional(k)]
    unexpected = [k for k in state if k not in expected]
    shared = _shared_prefixes(state)
    seen = f"; every key begins with {shared[-1]!r}, and without it they do not fit either" if shared else ""
    top = ", ".join(checkpoint.top_keys[:8]) + (", ..." if len(checkpoint.top_keys) > 8 else "")
    where = f"; read from its {checkpoint.entry!r} entry (the file's top-level keys: {top})" if checkpoint.entry else ""
    raise WeightsError(
        f"{arg('weights', display_path(checkpoint.path))}: does not fit {type(model).__name__}: "
        f"{len(missing)} missing keys{_few(missing)}, {len(unexpected)} unexpected keys{_few(unexpected)}{seen}{where}; "
        "is it a checkpoint of another architecture?"
    )


def _optional(key: str) -> bool:
    return key.rsplit(".", 1)[-1] == _OPTIONAL


def _fits(state: dict, expected: dict) -> bool:
    """Every key is the model's, and every key of the model's is there or optional."""
    return all(k in expected for k in state) and all(k in state or _optional(k) for k in expected)


def _shared_prefixes(state: dict) -> list[str]:
    """The dotted prefixes every key begins with, shortest first (``_orig_mod.``, ``_orig_mod.module.``)."""
    parts = [key.split(".")[:-1] for key in state]
    prefixes = []
    for depth in range(1, min(map(len, parts), default=0) + 1):
        if len({tuple(p[:depth]) for p in parts}) != 1:
            break
        prefixes.append(".".join(parts[0][:depth]) + ".")
    return prefixes


def _few(keys: list[str], n: int = 4) -> str:
    if not keys:
        return ""
    more = f", ... {len(keys) - n} more" if len(keys) > n else ""
    return " (" + ", ".join(keys[:n]) + more + ")"
