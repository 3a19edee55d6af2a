"""The memory format a model's input runs fastest in, learnt by timing the passes it makes.

Re-scoring methods (Score-CAM, Ablation-CAM) and the faithfulness measures run the same model hundreds of times on inputs of one shape. On a CPU a
convolutional network given its input channels-last (``torch.channels_last``) often runs
1.3-2x faster (oneDNN's convolutions prefer it and keep it from layer to layer), and some
models run slower (ConvNeXt permutes to channels-last and back itself). So, as
``torch.backends.cudnn.benchmark`` times algorithms, ``InputFormats`` times the passes it is
given: the first of an input shape runs in the format expected to be faster
(channels-last for a model with ``BatchNorm2d``, whose convolutions gain most; else as the
input came), the second in the other, and every later one in whichever ran faster per row.
No pass is run only to be timed. What was learnt is kept per model for the process's life
(``formats_for``), so explaining photo after photo from a notebook learns it once.

Only the input changes: a forward pre-hook on the model, removed when the pass ends,
makes its 4-D tensor input channels-last; the model's weights, modules and mode are left
as they are, and the outputs are the same numbers up to float rounding (a convolution
sums in another order). A model that cannot take a channels-last input (one that calls
``.view`` on it) is run as the input came, from then on.
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from hookviz.errors import HookvizError
from hookviz.hooks import HookSet

__all__ = ["FORMAT_ERRORS", "InputFormats", "channels_last_gradients", "channels_last_input", "formats_for"]

T = TypeVar("T")
#: What a model raises when it cannot take a channels-last input (a ``.view`` of it, a check of
#: its strides); an error of another kind (``MemoryError``) is never taken for the format's.
FORMAT_ERRORS = (RuntimeError, ValueError, AssertionError)
#: A pass of fewer rows is not timed: its time per row says little of a full batch's.
_TIMED_ROWS = 4


class InputFormats:
    """Per input shape (without the batch size), which format ran faster.

    ``formats.run(module, shape, call)`` returns ``call()``, run with ``module``'s input in the
    chosen format; ``shape`` is the input batch's shape.
    """

    def __init__(self, prefer_channels_last: bool = False) -> None:
        self._seconds: dict[tuple, dict[bool, float]] = {}  # per input shape: seconds a row, by channels-last
        self._first = prefer_channels_last
        self._refused = False  # the model failed on a channels-last input

    def run(self, module, shape: tuple, call: Callable[[], T]) -> T:
        """``call()``, which runs ``module`` on an input batch of ``shape``, in the format chosen for it."""
        if len(shape) != 4:
            return call()
        seen = self._seconds.setdefault(tuple(shape[1:]), {})
        channels_last = self._choice(seen)
        start = time.perf_counter()
        try:
            with channels_last_input(module) if channels_last else contextlib.nullcontext() as converted:
                result = call()
        except HookvizError:
            raise
        except FORMAT_ERRORS:
            if not channels_last:
                raise
            result = call()  # an error of the model's own raises here
            seen[True] = math.inf
            self.refuse_channels_last()  # the model cannot take it (a .view of its input): as the input came, from now on
            return result
        if shape[0] >= _TIMED_ROWS and (converted is None or converted):
            seen.setdefault(channels_last, (time.perf_counter() - start) / shape[0])
        elif channels_last and not converted:
            seen[True] = math.inf  # the module takes no tensor batch (a detector's list of images)
        return result

    @property
    def expected(self) -> bool:
        """Whether channels-last is the format expected faster, before any pass is timed
        (and the model has not failed on it)."""
        return self._first

    def refuse_channels_last(self) -> None:
        """The model failed on a channels-last input: every later pass takes the input as it came."""
        self._first, self._refused = False, True

    def chosen(self, shape: tuple) -> str:
        """``channels_last``, ``as given`` or ``undecided`` for inputs of ``shape``: for notes and benchmarks."""
        seen = self._seconds.get(tuple(shape[1:]), {})
        if len(seen) < 2:
            return "undecided"
        return "channels_last" if self._choice(seen) else "as given"

    def _choice(self, seen: dict[bool, float]) -> bool:
        if self._refused:
            return False
        if self._first not in seen:
            return self._first
        if (not self._first) not in seen:
            return not self._first
        return seen[True] < seen[False]


_FORMATS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def formats_for(module) -> InputFormats:
    """The ``InputFormats`` of ``module``, made on first use and dropped with the module."""
    import torch

    if module not in _FORMATS:
        batchnorm = any(isinstance(m, torch.nn.BatchNorm2d) for m in module.modules())
        _FORMATS[module] = InputFormats(prefer_channels_last=batchnorm)
    return _FORMATS[module]


def channels_last_gradients(module) -> bool:
    """Whether the passes with a graph (``explaining.extra_passes.InputGradients``: integrated
    gradients' steps, saliency, relevance propagation) give ``module`` its 4-D input
    channels-last: where that format is expected faster (``formats_for``: a model with
    ``BatchNorm2d``). Their forward and backward passes ran 10-11% faster so on resnet18 (32
    rows of 160 or 224 px, one torch thread, on this project's CPU).

    Decided by the model alone and never timed: a convolution sums in another order
    channels-last, so the format moves a map's last digits (1e-6 of its largest on resnet18,
    vgg11_bn and EfficientNet, 1.7e-3 on random-weight resnet50 and densenet121), and a timed
    choice would let a machine's load decide them. The same model gives the same map every run.
    """
    return formats_for(module).expected


@contextlib.contextmanager
def channels_last_input(module) -> Iterator[Any]:
    """Within the block, ``module``'s 4-D tensor input (its first argument) is made
    channels-last before its forward runs; yields a list that is true once an input was."""
    import torch

    converted: list[bool] = []

    def hook(_module, args):
        if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4 and args[0].is_floating_point():
            converted.append(True)
            return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
        return None

    with HookSet() as hooks:
        hooks.add(module.register_forward_pre_hook(hook))
        yield converted
