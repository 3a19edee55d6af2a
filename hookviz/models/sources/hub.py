"""The Hugging Face hub cache, where timm and transformers keep pretrained weights.

Both libraries download through ``huggingface_hub`` into one cache folder and can read it
offline. hookviz looks there first, downloads only when the hub is reachable and offline
mode is off, and otherwise fails in one line that names the folder. The folder and the
offline switch are read from the environment at each call (``HF_HUB_CACHE``, ``HF_HOME``,
``HF_HUB_OFFLINE``), not once at import as ``huggingface_hub.constants`` does, so a
process that changes them (a notebook, a test) is followed.

When the hub cannot be reached, huggingface_hub retries for about 25 seconds per file
before it gives up; hookviz gives up at the first network error instead (``fail_fast``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from hookviz.errors import WeightsError, arg, first_line

__all__ = [
    "cache_folder",
    "offline",
    "quiet",
    "fail_fast",
    "HubUnreachable",
    "fetch",
    "not_cached",
    "cached_repos",
    "cached_file",
]

_TRUE = {"1", "on", "yes", "true"}


def cache_folder() -> Path:
    """The hub cache, resolved as ``huggingface_hub`` resolves it."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expandvars(os.path.expanduser(os.environ[variable])))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


def offline() -> bool:
    """Whether the user switched the hub off (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


#: Loggers whose warnings hookviz says in its own words, or that need no words: huggingface_hub's
#: retries ("Retrying in 2s [Retry 2/5]"), and transformers' load report (a table in terminal
#: colours of the weights a checkpoint lacks: hookviz refuses or notes them itself). The whole
#: library's logger: raising ``transformers.modeling_utils``'s own level makes transformers
#: 5 list every layer "not sharded" (it checks that logger's level, not whether it is enabled).
_QUIETED = ("huggingface_hub", "transformers")


class HubUnreachable(ConnectionError):
    """The hub could not be reached: raised at the first network error, where huggingface_hub
    would wait and retry five times."""


class _GiveUp(logging.Filter):
    """On huggingface_hub's retry logger: turns the warning it logs before it waits out a
    network error (``'[Errno -2] ...' thrown while requesting HEAD URL``) into
    ``HubUnreachable``, and passes or drops the others (``HTTP Error 503 thrown ...``)."""

    def __init__(self, show: bool):
        super().__init__()
        self.show = show

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if " thrown while requesting " in message and not message.startswith("HTTP Error"):
            error = message.partition(" thrown while requesting ")[0].strip("'")
            raise HubUnreachable(f"the hub could not be reached: {error}")
        return self.show


@contextlib.contextmanager
def fail_fast() -> Iterator[None]:
    """Make a download from the hub fail at its first network error (no network, no name
    resolution, a timeout) instead of after huggingface_hub's retries, for the block.

    The logger's level and filters are restored. The logger is the process's, so a download
    in another thread during the block gives up early too.
    """
    logger = logging.getLogger("huggingface_hub.utils._http")
    gate = _GiveUp(show=logger.isEnabledFor(logging.WARNING))
    level = logger.level
    logger.setLevel(logging.WARNING)  # the gate sees the warning even when a parent logger is quieter
    logger.addFilter(gate)
    try:
        yield
    finally:
        logger.removeFilter(gate)
        logger.setLevel(level)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Keep huggingface_hub's and transformers' warnings (see ``_QUIETED``) and transformers'
    progress bars off stderr for the block: a failure is reported once, in hookviz's own line,
    and at once (``fail_fast``). The levels and the bars' setting are restored."""
    loggers = [logging.getLogger(name) for name in _QUIETED]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    bars = _progress_bars()
    was_on = bars is not None and bars.is_progress_bar_enabled()
    if was_on:
        bars.disable_progress_bar()  # transformers' "Loading weights: 100%" on every run
    try:
        with fail_fast():
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if was_on:
            bars.enable_progress_bar()


def _progress_bars():
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:
        return None
    needed = ("is_progress_bar_enabled", "disable_progress_bar", "enable_progress_bar")
    return transformers_logging if all(hasattr(transformers_logging, n) for n in needed) else None


def not_cached(label: str, repo_id: str, reason: str, needs: str | None = None, folder: Path | str | None = None) -> WeightsError:
    """The one-line error for files that are neither cached nor downloadable.

    Args:
        needs: what cannot be done without, when it is more than the weights.
        folder: the cache looked in, when it is not hookviz's (``cache_folder()``).
    """
    alternatives = needs or (f"or pass {arg('weights', 'PATH')} (a state_dict or .safetensors file) or {arg('weights', 'none')}")
    return WeightsError(
        f"{label}: {repo_id} is not in the Hugging Face cache ({folder or cache_folder()}) {reason}; "
        f"fetch it where there is network (`hf download {repo_id}`) and copy that cache here "
        f"(or point HF_HUB_CACHE at a copy), {alternatives}"
    )


def fetch(repo_id: str, filenames: Sequence[str], label: str, revision: str | None = None) -> Path:
    """The first of ``filenames`` that ``repo_id`` has, from the cache or downloaded into it.

    Args:
        label: how the error names the argument (``--weights DEFAULT``).

    Raises:
        WeightsError: in one line naming the cache folder, when no file is cached and
            downloading is switched off or fails.
    """
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    folder = cache_folder()
    for filename in filenames:  # no network: what is already here wins
        found = try_to_load_from_cache(repo_id, filename, cache_dir=folder, revision=revision)
        if isinstance(found, str):
            return Path(found)
    if offline():
        raise not_cached(label, repo_id, "and HF_HUB_OFFLINE is set")
    for filename in filenames:
        try:
            with quiet():
                return Path(hf_hub_download(repo_id, filename, cache_dir=folder, revision=revision))
        except LocalEntryNotFoundError as exc:  # the hub could not be reached
            raise not_cached(label, repo_id, f"and downloading failed ({first_line(exc)})") from None
        except EntryNotFoundError:
            continue  # the repository has no such file: try the next name
        except Exception as exc:  # network and HTTP errors come in many kinds; each means "no file"
            raise not_cached(label, repo_id, f"and downloading failed ({first_line(exc)})") from None
    raise not_cached(label, repo_id, f"and the repository has none of {', '.join(filenames)}")


def cached_file(repo_id: str, filename: str) -> Path | None:
    """``filename`` of ``repo_id`` when the cache holds it (no network), else ``None``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache_folder())
    except ValueError:  # not a repository name huggingface_hub accepts: nothing cached under it
        return None
    return Path(found) if isinstance(found, str) else None


def cached_repos() -> list[tuple[str, dict]]:
    """``(repo_id, config.json)`` of every cached model repository with a config, sorted by name.

    Reads only the cache's folders and small JSON files: no network, no transformers import.
    """
    folder = cache_folder()
    found = []
    for repo in sorted(folder.glob("models--*")) if folder.is_dir() else ():
        snapshot = _newest_snapshot(repo)
        config = snapshot / "config.json" if snapshot is not None else None
        if config is None or not config.is_file():
            continue
        try:
            document = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(document, dict):
            found.append((repo.name[len("models--") :].replace("--", "/"), document))
    return found


def _newest_snapshot(repo: Path) -> Path | None:
    ref = repo / "refs" / "main"
    if ref.is_file():
        snapshot = repo / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if snapshot.is_dir():
            return snapshot
    snapshots = [p for p in (repo / "snapshots").glob("*") if p.is_dir()]
    return max(snapshots, key=lambda p: p.stat().st_mtime) if snapshots else None
