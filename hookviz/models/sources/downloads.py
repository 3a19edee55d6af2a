"""What a download that failed inside a user's factory was fetching, read from the traceback
of the factory's exception, so that the failure gets the one-line cache hint hookviz gives
for its own ``--weights DEFAULT``: the file, the cache it belongs in, what to do.

Two downloaders are recognised, by their frames: ``torch.hub.download_url_to_file``
(torchvision's ``weights="DEFAULT"``, timm's older URLs) and huggingface_hub's
``hf_hub_download`` (timm's ``pretrained=True``, transformers). Their local variables name
the URL and target file, or the repository and cache; nothing is patched to learn them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from hookviz.errors import WeightsError, arg, first_line

__all__ = ["failed_download"]


def failed_download(name: str, error: BaseException) -> WeightsError | None:
    """The one-line error for ``error`` when it comes from a download the factory ``name``
    started; ``None`` when it does not.

    Args:
        name: the factory, as ``--model`` gave it.
    """
    for exc in _chain(error):
        for frame in _frames(exc):
            if _is(frame, "torch.hub", "download_url_to_file"):
                return _torch_hub(name, frame.f_locals, exc)
            if _is(frame, "huggingface_hub.file_download", "hf_hub_download"):
                return _hugging_face(name, frame.f_locals, error)
    return None


def _alternatives() -> str:
    return (
        f"or have the factory build the model without pretrained weights (weights=None, pretrained=False) and "
        f"pass {arg('weights', 'PATH')}"
    )


def _torch_hub(name: str, found: dict, exc: BaseException) -> WeightsError:
    from hookviz.models.sources.torchvision_models import not_in_torch_hub

    return not_in_torch_hub(
        arg("model", name),
        "the pretrained weights the factory asked for",
        found.get("url"),
        found.get("dst"),
        first_line(exc),
        _alternatives(),
    )


def _hugging_face(name: str, found: dict, error: BaseException) -> WeightsError:
    from huggingface_hub import constants

    from hookviz.models.sources.hub import HubUnreachable, not_cached

    if constants.is_offline_mode():
        reason = "and HF_HUB_OFFLINE is set"
    else:
        cause = next((e for e in _chain(error) if isinstance(e, HubUnreachable)), error)
        reason = f"and downloading failed ({first_line(cause)})"
    folder = found.get("cache_dir") or constants.HF_HUB_CACHE
    return not_cached(arg("model", name), found.get("repo_id"), reason, _alternatives(), folder)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the exceptions it was raised from or while handling, once each."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        exc = pending.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        pending += [exc.__cause__, exc.__context__]


def _frames(exc: BaseException):
    trace = exc.__traceback__
    while trace is not None:
        yield trace.tb_frame
        trace = trace.tb_next


def _is(frame, module: str, function: str) -> bool:
    loaded = sys.modules.get(module)
    return frame.f_code.co_name == function and getattr(loaded, "__file__", None) == frame.f_code.co_filename
