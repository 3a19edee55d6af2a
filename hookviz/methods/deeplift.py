"""DeepLIFT (Shrikumar et al. 2017), its rescale rule, as captum's ``DeepLift``: the input's
difference from a baseline times a gradient in which every nonlinearity's derivative is
replaced by its multiplier, its output's difference from the baseline's over its input's:

    map = (x - b) * dS/dx,   d out/d in at each nonlinearity = (out - out_b) / (in - in_b)

(the plain derivative where the input differs from the baseline's by less than 1e-10, as
captum). The baseline ``b`` (``--dl-baseline``) takes ``--ig-baseline``'s choices and is made by
the same function: ``zero`` (captum's default), ``blur`` or ``mean``. It is an option of its own,
not integrated gradients' group shared: the option seam shares a whole group, so ``--steps``
would then be taken by DeepLIFT too, changing nothing, and its refusals would name DeepLIFT
among the methods that take ``--steps``.

The nonlinearities are the model's modules: every elementwise activation (``nn.ReLU``, ``ReLU6``,
``LeakyReLU``, ``ELU``, ``GELU``, ``SiLU``, ``Sigmoid``, ``Tanh``, ``Softplus``, ``Hard*`` ...) and
max pooling (``nn.MaxPool1d/2d/3d``, by captum's rule for it). Each costs two forward and
backward passes per image: one of the baseline, whose hooks record what each nonlinearity
takes and gives, call by call, and one of the input, whose hooks hand back the multipliers;
hooks are removed when each pass ends and the model is never changed or copied.

Where hookviz differs from captum 0.9 (docs/methods.md): captum rescales only ``nn.ReLU``,
``ELU``, ``LeakyReLU``, ``Sigmoid``, ``Tanh``, ``Softplus``, ``Softmax`` and max pooling, and passes the
plain gradient through the others (``ReLU6``, ``GELU``, ``SiLU``) without a word; it refuses a
module called twice in one pass (a torchvision ResNet block calls its ``relu`` twice), where
hookviz records each call. Neither can see a nonlinearity called as a function (``F.relu``,
``torch.sigmoid``, a softmax inside attention): captum passes its plain gradient, hookviz
refuses the model in one line.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.hooks import HookSet
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.integrated_gradients import IG_BASELINES, baseline
from hookviz.options.declared import check_values, option

__all__ = ["DeepLiftOptions", "EPS", "FUNCTIONAL", "deeplift", "deeplift_maps", "rescaled", "nonlinear_modules"]

#: Below this difference from the baseline a nonlinearity keeps its plain derivative (captum's ``eps``).
EPS = 1e-10
#: The elementwise activations the rescale rule replaces (``torch.nn`` names; subclasses too).
_ELEMENTWISE = (
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh",
    "Softplus", "Hardtanh", "Hardswish", "Hardsigmoid", "LogSigmoid", "PReLU",
)  # fmt: skip
#: Nonlinear functions a model may call outside those modules, which no module hook can see.
FUNCTIONAL = frozenset(
    {
        "relu", "relu_", "relu6", "leaky_relu", "leaky_relu_", "elu", "elu_", "selu", "celu", "gelu", "silu", "mish",
        "sigmoid", "sigmoid_", "tanh", "tanh_", "softplus", "hardtanh", "hardtanh_", "hardswish", "hardsigmoid",
        "logsigmoid", "prelu", "softmax", "log_softmax", "max_pool1d", "max_pool2d", "max_pool3d",
        "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool1d",
        "adaptive_max_pool2d", "adaptive_max_pool3d", "scaled_dot_product_attention",
    }
)  # fmt: skip


@functools.cache
def _kinds() -> tuple[tuple, tuple]:
    import torch

    elementwise = tuple(getattr(torch.nn, name) for name in _ELEMENTWISE)
    return elementwise, (torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.MaxPool3d)


def nonlinear_modules(model) -> list:
    """The modules of ``model`` the rescale rule replaces: elementwise activations and max pooling."""
    elementwise, pools = _kinds()
    return [module for module in model.modules() if isinstance(module, elementwise + pools)]


@dataclass(frozen=True)
class DeepLiftOptions:
    """DeepLIFT's settings (``--dl-baseline``; ``dl_baseline=``).

    Attributes:
        dl_baseline: the reference the input is compared with: ``zero`` (zeros in the model's input
            space, captum's default), ``blur`` (the input blurred) or ``mean`` (its mean per channel),
            as ``--ig-baseline``'s.
    """

    dl_baseline: str = option(
        "zero",
        help="DeepLIFT: compare with zero (zeros in the model's input space, as captum's), blur (the input blurred) "
        "or mean (its mean colour), as --ig-baseline.",
        choices=IG_BASELINES,
    )

    def __post_init__(self):
        check_values(self)


@register_method(
    "deeplift",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    options=DeepLiftOptions,
)
def deeplift(ctx: MethodContext):
    """DeepLIFT (rescale rule): the input's difference from a baseline times the multipliers' gradient."""
    import torch

    assert ctx.inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    settings = ctx.settings if isinstance(ctx.settings, DeepLiftOptions) else DeepLiftOptions()
    maps = []
    for n in range(len(ctx.inputs)):
        image = ctx.inputs[n : n + 1]
        maps.append(deeplift_maps(ctx.input_gradient, image, baseline(image, settings.dl_baseline), n).mean(dim=0))
    return torch.stack(maps)


def deeplift_maps(gradient, inputs, baselines, image: int):
    """DeepLIFT's maps of ``inputs`` (M, C, ...) against ``baselines`` (M, C, ...), row by row,
    all rows explaining image ``image`` of the batch, through ``gradient`` (``ctx.input_gradient``):
    (M, C, ...) float32, from one pass of the baselines (recording) and one of the inputs."""
    import torch

    records: dict = {}
    rows = torch.full((len(inputs),), image, dtype=torch.long)
    gradient(baselines, rows, within=lambda model: recording(model, records))
    multipliers = gradient(inputs, rows, within=lambda model: rescaled(model, records))
    return (inputs - baselines).float() * multipliers


@contextlib.contextmanager
def recording(model, records: dict) -> Iterator[None]:
    """Within the block, each call of a nonlinear module of ``model`` appends its input and
    output (detached copies) to ``records[module]``; a nonlinear function called outside them
    in the model's forward pass is refused when the block ends."""
    watch = _watch()
    with HookSet() as hooks, watch(model, hooks) as seen:
        for module in nonlinear_modules(model):
            hooks.add(module.register_forward_pre_hook(functools.partial(_take_input, records)))
            hooks.add(module.register_forward_hook(functools.partial(_keep_output, records)))
        yield
    if seen:
        raise UsageError(
            f"{arg('cam', 'deeplift')}: {type(model).__name__} calls {', '.join(sorted(seen))} as a function, "
            "which DeepLIFT's hooks on modules cannot see (captum's pass its plain gradient); choose integrated-gradients"
        )


def _take_input(records, module, args):
    records.setdefault(module, []).append([args[0].detach().clone(), None])


def _keep_output(records, module, _args, output):
    records[module][-1][1] = output.detach().clone()


@contextlib.contextmanager
def rescaled(model, records: dict) -> Iterator[None]:
    """Within the block, the gradient through each call of a nonlinear module of ``model`` is
    its rescale multiplier against the call ``records`` holds for it (the baseline's), call
    by call; the modules' own forward is unchanged (an in-place one works on a copy)."""
    state: dict = {}
    with HookSet() as hooks:
        for module in nonlinear_modules(model):
            hooks.add(module.register_forward_pre_hook(functools.partial(_copy_input, state)))
            hooks.add(module.register_forward_hook(functools.partial(_rescale, records, state)))
        yield


def _copy_input(state, module, args):
    state[module] = args[0]
    return (args[0].clone(), *args[1:])  # an in-place activation then leaves the graph's input as it was


def _rescale(records, state, module, _args, output):
    import torch

    calls = records.get(module, [])
    seen = state.setdefault(("calls", module), 0)
    state[("calls", module)] = seen + 1
    if seen >= len(calls) or calls[seen][0].shape != state[module].shape:
        raise UsageError(
            f"{arg('cam', 'deeplift')}: {type(module).__name__} ran differently for the input than for the baseline "
            "(the model's path depends on its input); choose integrated-gradients"
        )
    x, (x_ref, y_ref) = state.pop(module), calls[seen]
    if isinstance(module, _kinds()[0]):
        with torch.no_grad():
            delta = x - x_ref
            small = delta.abs() < EPS
            multiplier = torch.where(small, _derivative(module, x), (output - y_ref) / torch.where(small, 1, delta))
        return output.detach() + multiplier * (x - x.detach())
    return _pool_rescale().apply(x, output.detach(), module, x_ref, y_ref)


def _derivative(module, x):
    """The plain derivative of an elementwise ``module`` at ``x``."""
    import torch

    with torch.enable_grad():
        leaf = x.detach().requires_grad_(True)
        (found,) = torch.autograd.grad(module.forward(leaf.clone()).sum(), leaf)
    return found


@functools.cache
def _pool_rescale():
    import torch
    import torch.nn.functional as F

    class PoolRescale(torch.autograd.Function):
        """Max pooling's output, whose backward is captum's rule for it: the output's gradient
        times the difference of the input's and the baseline's pooled outputs, each part
        handed back to where its own maximum was, over the input's difference from the baseline."""

        @staticmethod
        def forward(ctx, x, y, module, x_ref, y_ref):
            ctx.save_for_backward(x, y, x_ref, y_ref)
            ctx.module = module
            return y.clone()

        @staticmethod
        def backward(ctx, grad):
            x, y, x_ref, y_ref = ctx.saved_tensors
            module, dims = ctx.module, x.dim() - 2
            pool = getattr(F, f"max_pool{dims}d")
            unpool = getattr(F, f"max_unpool{dims}d")
            shape = dict(kernel_size=module.kernel_size, stride=module.stride, padding=module.padding)

            def back(part, source):
                _, where = pool(source, dilation=module.dilation, ceil_mode=module.ceil_mode, return_indices=True, **shape)
                return unpool(part, where, output_size=list(x.shape), **shape)

            with torch.no_grad():
                top = torch.max(y, y_ref)
                delta = x - x_ref
                small = delta.abs() < EPS
                spread = (back(grad * (top - y_ref), x) + back(grad * (y - top), x_ref)) / torch.where(small, 1, delta)
            with torch.enable_grad():
                leaf = x.detach().requires_grad_(True)
                (plain,) = torch.autograd.grad(module.forward(leaf), leaf, grad)
            return torch.where(small, plain, spread), None, None, None, None

    return PoolRescale


def _watch():
    """A context manager ``watch(model, hooks)`` yielding the set of nonlinear functions
    (``FUNCTIONAL``) the model's forward pass calls outside its nonlinear modules."""
    from torch.overrides import TorchFunctionMode

    class Watch(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.depth = {"model": 0, "module": 0}
            self.seen: set[str] = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if self.depth["model"] > 0 and self.depth["module"] == 0 and name in FUNCTIONAL:
                self.seen.add(name)
            return func(*args, **(kwargs or {}))

    def count(depth: dict, key: str, step: int):
        def hook(*_):
            depth[key] += step

        return hook

    @contextlib.contextmanager
    def watch(model, hooks: HookSet) -> Iterator[set[str]]:
        mode = Watch()
        hooks.add(model.register_forward_pre_hook(count(mode.depth, "model", 1)))
        hooks.add(model.register_forward_hook(count(mode.depth, "model", -1)))
        for module in nonlinear_modules(model):
            hooks.add(module.register_forward_pre_hook(count(mode.depth, "module", 1)))
            hooks.add(module.register_forward_hook(count(mode.depth, "module", -1)))
        with mode:
            yield mode.seen

    return watch
