"""Guided backpropagation (Springenberg et al. 2015): the gradient of the target's score with
respect to the input, where every ReLU passes back only positive gradients, and only where
its input was positive. A map at the input's resolution, one value per input channel.

    d/dx through each ReLU = ReLU(g) where x > 0, else 0

hookviz guides the model's ``nn.ReLU`` modules through forward hooks removed when the pass
ends (the model is never changed or copied). pytorch-grad-cam's ``GuidedBackpropReLUModel``
swaps them for modules of its own and back, and what it swaps back is one new
``nn.ReLU()`` for all of them, without their ``inplace`` flag.
"""

from __future__ import annotations

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method

__all__ = ["guided_backprop", "needs_relus", "relu_modules", "check_relus"]


def relu_modules(model) -> list:
    """The ``nn.ReLU`` modules of ``model`` (guided backprop guides these)."""
    import torch

    return [module for module in model.modules() if isinstance(module, torch.nn.ReLU)]


def check_relus(model, method: str) -> None:
    """Raise UsageError, naming ``method``, when ``model`` has no ``nn.ReLU`` to guide."""
    if not relu_modules(model):
        raise UsageError(
            f"{arg('cam', method)}: {type(model).__name__} has no nn.ReLU module (its activations are another "
            "function, or F.relu), so guided backprop has nothing to guide; choose integrated-gradients"
        )


def needs_relus(method: str):
    """A ``Method.check`` that refuses a model without ``nn.ReLU`` (nothing to guide), naming ``method``."""

    def check(model) -> None:
        check_relus(model, method)

    return check


@register_method(
    "guided-backprop",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    check=needs_relus("guided-backprop"),
)
def guided_backprop(ctx: MethodContext):
    """Guided backprop: the input gradient, with every ReLU passing back only positive gradients."""
    assert ctx.inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    others = ctx.input_gradient.others()
    if not others:
        return ctx.input_gradient(ctx.inputs, guided=True)
    import torch

    from hookviz.methods.base import MapFigures

    # a sample of several inputs: the gradient reaches each of them, a map each at its own shape
    main, by_input, _ = ctx.input_gradient.along(ctx.inputs, others, torch.arange(len(ctx.inputs)), guided=True)
    maps = tuple({name: grads[n].cpu().numpy() for name, grads in by_input.items()} for n in range(len(ctx.inputs)))
    return MapFigures(main, tuple({} for _ in maps), maps)
