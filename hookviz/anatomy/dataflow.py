"""Data flow: which axis of a 4-D tensor holds the channels, followed through the ops that made it.

A shape cannot always say it: ConvNeXt's first block at 384 pixels puts out 1x96x96x96,
where (N, C, H, W) and channels-last (N, H, W, C) fit equally well. The ops that made the
tensor can. The model's input is channels-first, and so is what a convolution, a batch,
group or instance norm, a pooling or a resampling puts out; a permute, transpose or movedim
moves the axes of its input; a view or reshape that changes the shape loses track; any other
op keeps the order of the 4-D inputs it was computed from when they agree (a residual sum,
an activation, a clone). A LayerNorm or Linear over a 4-D tensor of unknown order acts on
its last axis: that is the channel axis.

``ChannelOrders`` follows this during a forward pass (a ``TorchFunctionMode``, so every op
is seen, inside any module); ``orders.kind(tensor)`` then says ``nchw``, ``nhwc`` (or
another order of the four axes with the batch first, such as ``nwhc`` after
``x.transpose(1, 3)``) or ``None`` (unknown: made where the mode cannot see, such as
TorchScript, or by a reshape).
"""

from __future__ import annotations

from hookviz.hooks import HookSet

__all__ = ["ChannelOrders"]

CHANNELS_FIRST = "NCHW"  # the role of each axis, in order
CHANNELS_LAST = "NHWC"

# Ops whose 4-D output is channels-first whatever their input (torch and torch.nn.functional names).
_CHANNELS_FIRST_OPS = frozenset(
    {
        "conv2d",
        "conv_transpose2d",
        "convolution",
        "_convolution",
        "batch_norm",
        "instance_norm",
        "group_norm",
        "max_pool2d",
        "avg_pool2d",
        "lp_pool2d",
        "adaptive_avg_pool2d",
        "adaptive_max_pool2d",
        "max_pool2d_with_indices",
        "adaptive_max_pool2d_with_indices",
        "fractional_max_pool2d",
        "interpolate",
        "upsample",
        "upsample_nearest",
        "upsample_bilinear",
        "pixel_shuffle",
        "pixel_unshuffle",
        "local_response_norm",
        "fold",
        "grid_sample",
    }
)
# The 1-D and 3-D twins of those ops: channels-first outputs of rank 3 and 5.
_OTHER_RANK_OPS = frozenset(
    {
        "conv1d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose3d",
        "max_pool1d",
        "max_pool3d",
        "avg_pool1d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool3d",
        "max_pool1d_with_indices",
        "max_pool3d_with_indices",
    }
)
# Ops over the last axis: on a 4-D tensor of unknown order, that axis is the channels.
_LAST_AXIS_OPS = frozenset({"layer_norm", "rms_norm", "linear"})
_AXIS_MOVERS = frozenset(
    {
        "permute",
        "transpose",
        "transpose_",
        "swapaxes",
        "swapdims",
        "movedim",
        "moveaxis",
        "mT",
        "mH",
        "T",
        "H",
    }
)
_RESHAPES = frozenset(
    {
        "view",
        "reshape",
        "view_as",
        "reshape_as",
        "unflatten",
        "flatten",
        "as_strided",
        "unfold",
        "view_as_real",
    }
)
_PROBE = (2, 3, 5, 7)  # distinct sizes: where each lands after an axis move names the move


class ChannelOrders:
    """Follows the axis order of every 4-D tensor made while its ``with`` block runs.

    Example::

        with ChannelOrders(model) as orders:
            out = model(x)
            kind = orders.kind(some_recorded_output)  # "nchw", "nhwc" or None

    Only tensors made inside the block (or ``model``'s input) are known; nothing is kept
    alive by it. The model is not changed: one forward pre-hook marks its input, and it is
    removed when the block ends.
    """

    def __init__(self, model) -> None:
        self.model = model
        self._hooks = HookSet()
        self._mode = None
        self._orders = None  # tensor -> the role of each of its axes ("NHWC"), weakly keyed

    def __enter__(self) -> "ChannelOrders":
        from torch.utils.weak import WeakTensorKeyDictionary

        self._orders = WeakTensorKeyDictionary()
        self._hooks.add(self.model.register_forward_pre_hook(lambda _m, args: self._mark_input(args)))
        self._mode = _follow_mode(self._orders)
        try:
            self._mode.__enter__()
        except BaseException:
            self._hooks.close()
            raise
        return self

    def __exit__(self, *exc_info) -> bool:
        try:
            self._mode.__exit__(*exc_info)
        finally:
            self._hooks.close()
        return False

    def kind(self, tensor) -> str | None:
        """The order of a 4-D tensor's axes, batch first (``nchw``, ``nhwc``, ``nwhc``, ...),
        ``ncl`` or ``ncdhw`` for a 3-D or 5-D channels-first map (a Conv1d's, a Conv3d's),
        or ``None`` when unknown (or the batch axis was moved)."""
        if tensor is None or self._orders is None:
            return None
        order = self._orders.get(tensor)
        return order.lower() if order is not None and order[0] == "N" else None

    def _mark_input(self, args) -> None:
        import torch

        for value in args:
            if isinstance(value, torch.Tensor) and value.dim() == 4:
                self._orders.setdefault(value, CHANNELS_FIRST)  # torch's convention for images
                return

    def __repr__(self) -> str:
        return f"ChannelOrders({type(self.model).__name__})"


def _follow_mode(orders):
    """A ``TorchFunctionMode`` that writes into ``orders`` the axis order of each 4-D tensor an op makes."""
    from torch.overrides import TorchFunctionMode

    class _Follow(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            result = func(*args, **kwargs)
            outputs = _four_d(result)
            if not outputs:
                _follow_other_ranks(_name(func), args, kwargs, result, orders)
            else:
                order = _order_after(_name(func), func, args, kwargs, outputs, orders)
                for tensor in outputs:
                    if order is None:
                        orders.pop(tensor, None)  # an in-place op may have changed what it was
                    else:
                        orders[tensor] = order
            return result

    return _Follow()


#: The roles of a channels-first map's axes by its rank: a Conv1d's (N, C, L), a Conv3d's (N, C, D, H, W).
_OTHER_RANKS = {3: "NCL", 5: "NCDHW"}


def _follow_other_ranks(name: str, args, kwargs, result, orders) -> None:
    """Mark a 3-D or 5-D tensor a channels-first op made (a Conv1d's, a Conv3d's) and what an
    op on such tensors alone makes of the same shape (an activation, a residual sum): a
    Conv1d's (N, C, L) is then never read as (N, tokens, C). Axis moves are not followed."""
    import torch

    if not isinstance(result, torch.Tensor) or result.dim() not in _OTHER_RANKS:
        return
    role = _OTHER_RANKS[result.dim()]
    if name in _CHANNELS_FIRST_OPS or name in _OTHER_RANK_OPS:
        orders[result] = role
        return
    inputs = [t for t in _tensors((args, kwargs)) if t.dim() == result.dim()]
    if inputs and all(t.shape == result.shape and orders.get(t) == role for t in inputs) and name not in _RESHAPES:
        orders[result] = role
    else:
        orders.pop(result, None)


def _tensors(value) -> list:
    """The tensors in ``value`` (a tensor, or tensors in tuples, lists and dicts, at any depth)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _name(func) -> str:
    """An op's name; for a property (``x.mT``, ``x.data``) the property's, not ``__get__``."""
    name = getattr(func, "__name__", "")
    return getattr(getattr(func, "__self__", None), "__name__", name) if name == "__get__" else name


def _order_after(name: str, func, args, kwargs, outputs, orders) -> str | None:
    """The axis order of ``outputs`` (the 4-D tensors ``func`` returned), or ``None`` if unknown."""
    if name in _CHANNELS_FIRST_OPS:
        return CHANNELS_FIRST
    inputs = _four_d((args, kwargs))
    if name in _AXIS_MOVERS:
        source = orders.get(args[0]) if args and inputs and args[0] is inputs[0] else None
        return None if source is None else _moved(func, args, kwargs, source)
    if name in _RESHAPES:  # a view that keeps the shape keeps the order; any other scrambles it
        same = [orders[t] for t in inputs if t in orders and t.shape == outputs[0].shape]
        return same[0] if same and len(outputs) == 1 else None
    known = {orders[t] for t in inputs if t in orders}
    if len(known) == 1:
        return known.pop()
    if not known and name in _LAST_AXIS_OPS:
        return CHANNELS_LAST
    return None


def _moved(func, args, kwargs, source: str) -> str | None:
    """``source`` with its axes moved as ``func`` moves them: the same call on an empty tensor
    on the meta device (no memory, no compute) whose four sizes differ shows where each goes."""
    import torch

    probe = torch.empty(_PROBE, device="meta")
    try:
        moved = func(probe, *args[1:], **kwargs)
    except (RuntimeError, TypeError, ValueError, IndexError):  # not a plain move of the four axes
        return None
    if not isinstance(moved, torch.Tensor) or moved.dim() != 4 or sorted(moved.shape) != sorted(_PROBE):
        return None
    return "".join(source[_PROBE.index(size)] for size in moved.shape)


def _four_d(value) -> list:
    """The 4-D tensors in ``value`` (a tensor, or tensors in tuples, lists and dicts, at any depth)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.dim() == 4 else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _four_d(item)]
    return []
