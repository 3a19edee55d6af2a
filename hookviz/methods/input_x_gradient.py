"""Input x gradient (Shrikumar et al. 2016), as captum's ``InputXGradient``: the input times
the gradient of the target's score with respect to it, one value per input channel and
position, at the input's resolution:

    map = x * dS/dx

Signed: a value of the map is what the first-order term of the score gives that input value
(from zero in the model's input space). One forward and one backward pass per image.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method

__all__ = ["input_x_gradient"]


@register_method("input-x-gradient", needs_gradients=False, needs_input=True, needs_input_gradients=True, resolution="input")
def input_x_gradient(ctx: MethodContext):
    """Input x gradient: the input times the gradient of the target's score with respect to it."""
    assert ctx.inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    return ctx.inputs.float() * ctx.input_gradient(ctx.inputs)
