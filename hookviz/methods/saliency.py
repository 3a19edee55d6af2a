"""Saliency (Simonyan et al. 2014), as captum's ``Saliency``: the absolute value of the
gradient of the target's score with respect to the input, one value per input channel and
position, at the input's resolution:

    map = |dS/dx|

captum's default (``abs=True``): the map says how strongly each input value moves the score,
not which way. One forward and one backward pass per image.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method

__all__ = ["saliency"]


@register_method("saliency", needs_gradients=False, needs_input=True, needs_input_gradients=True, resolution="input")
def saliency(ctx: MethodContext):
    """Saliency: the absolute value of the input gradient (captum's default, abs=True)."""
    assert ctx.inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    return ctx.input_gradient(ctx.inputs).abs()
