"""Options: what a caller asks of hookviz, in a few groups that each check themselves.

The ``hookviz`` command and the Python API build the same groups, so both refuse the same
bad values with the same words (spelled as the caller wrote them, see ``errors.arg``).
A group is a frozen dataclass: once built, its values are valid and inner code trusts
them.

* ``ModelOptions``: which model, which weights, which device.
* ``InputOptions``: how photos become the model's input (overrides of its preprocessing).
* ``LayerOptions``: which layers to record.
* ``TargetOptions``: what to explain (target, objective, CAM method, top-K).
* ``PictureOptions``: which pictures to draw, and how.
* ``RunOptions``: where a run writes, in what batches, which slice of the images.
* ``CheckOptions``: the ``--fail-on`` checks of a CI smoke run, and the baseline it is compared with.
* ``Tolerances``: how far a compared figure may move before it counts as drift.
* ``TrustOptions``: how far to trust a map: faithfulness measures and the randomisation check.

Each group is a module of this package (``model``, ``inputs``, ``layers``, ``target``,
``pictures``, ``run``, ``checks``, ``trust``); this module re-exports their names. The groups a
method, a task or a sample kind declares for itself (integrated gradients' ``IGOptions``, a
detector's ``DetectOptions``) are read through ``declared``.
"""

import dataclasses

from hookviz.options.base import answers
from hookviz.options.checks import CheckOptions, Tolerances
from hookviz.options.inputs import DEFAULT_MAX_PIXELS, MAX_SIDE, InputOptions, parse_triple
from hookviz.options.layers import LAYOUT_CHOICES, LayerOptions
from hookviz.options.model import ModelOptions, read_prompts, task_choices
from hookviz.options.pictures import MAX_TILES, ChannelSelection, PictureOptions
from hookviz.options.run import RunOptions, parse_shard
from hookviz.options.target import BOX_OBJECTIVES, MAX_TOPK, OBJECTIVES, TargetOptions
from hookviz.options.trust import TrustOptions

__all__ = [
    "ModelOptions",
    "InputOptions",
    "LayerOptions",
    "TargetOptions",
    "PictureOptions",
    "RunOptions",
    "CheckOptions",
    "Tolerances",
    "TrustOptions",
    "ChannelSelection",
    "OBJECTIVES",
    "BOX_OBJECTIVES",
    "parse_triple",
    "parse_shard",
    "read_prompts",
    "MAX_SIDE",
    "MAX_TOPK",
    "MAX_TILES",
    "DEFAULT_MAX_PIXELS",
    "LAYOUT_CHOICES",
    "task_choices",
]


@answers("run_settings")
def run_settings() -> set[str]:
    """The names of the run's own option groups' fields: no method, task or sample kind may
    name a setting of its own so (``declared.check_group``)."""
    core: tuple[type, ...] = (ModelOptions, InputOptions, LayerOptions, TargetOptions, PictureOptions)
    core += (RunOptions, CheckOptions, TrustOptions, Tolerances)
    return {f.name for group in core for f in dataclasses.fields(group)}
