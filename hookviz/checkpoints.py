"""Checkpoints: read a state_dict from a file without running any code, and load it.

``torch.load`` is always called with ``weights_only=True``, so a pickle that would
execute code is refused before anything runs. ``.safetensors`` files are read with
safetensors. The usual wrappers are undone: ``{"state_dict": ...}``, ``{"model": ...}``,
and the ``module.`` (DataParallel) and ``_orig_mod.`` (torch.compile) key prefixes.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

from .errors import WeightsError, arg, display_path, first_line

__all__ = ["read_state_dict", "load_into"]

_WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "net", "weights")
_PREFIXES = ("module.", "_orig_mod.")


def read_state_dict(path: Path) -> dict:
    """Return the tensors stored in ``path`` as a flat ``{name: tensor}`` dict.

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
            return _unwrap(load_file(str(path), device="cpu"), path)
        except (SafetensorError, Exception) as exc:  # a file that is not safetensors, or is cut short
            raise WeightsError(f"{arg('weights', display_path(path))}: not a readable safetensors file ({first_line(exc)})") from None
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


def _unwrap(obj, path: Path) -> dict:
    import torch

    for _ in range(3):
        if isinstance(obj, dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
            inner = next((obj[k] for k in _WRAPPER_KEYS if isinstance(obj.get(k), dict)), None)
            if inner is None:
                break
            obj = inner
    if not isinstance(obj, dict) or not obj:
        raise WeightsError(
            f"{arg('weights', display_path(path))}: holds a {type(obj).__name__}, not a state_dict; "
            "save one with torch.save(model.state_dict(), path)"
        )
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise WeightsError(f"{arg('weights', display_path(path))}: the dict holds no tensors; is this a state_dict?")
    for prefix in _PREFIXES:
        if all(k.startswith(prefix) for k in tensors):
            tensors = {k[len(prefix):]: v for k, v in tensors.items()}
    return tensors


def load_into(model, path: Path) -> None:
    """Load the state_dict in ``path`` into ``model``, strictly.

    Raises:
        WeightsError: the keys or shapes do not match; the message names them.
    """
    state = read_state_dict(path)
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise WeightsError(
            f"{arg('weights', display_path(path))}: does not fit {type(model).__name__}: "
            f"{len(missing)} missing keys{_few(missing)}, {len(unexpected)} unexpected keys{_few(unexpected)}; "
            "is it a checkpoint of another architecture?"
        )
    wrong = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items() if tuple(state[k].shape) != tuple(v.shape)
    ]
    if wrong:
        raise WeightsError(
            f"{arg('weights', display_path(path))}: shapes do not fit the model ({len(wrong)} tensors: {'; '.join(wrong[:3])}); "
            "was it trained with another number of classes?"
        )
    model.load_state_dict(state, strict=True)


def _few(keys: list[str], n: int = 4) -> str:
    if not keys:
        return ""
    more = f", ... {len(keys) - n} more" if len(keys) > n else ""
    return " (" + ", ".join(keys[:n]) + more + ")"
