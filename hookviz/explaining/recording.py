"""Recording: hook the selected layers and keep their inputs, outputs and gradients.

Gradients come from tensor hooks and ``torch.autograd.grad`` on the recorded tensors,
never from ``register_full_backward_hook``: that hook wraps the module's output in a
view, and an in-place op after the layer (vgg16_bn's ``ReLU(inplace=True)`` after
``features.18``) then fails with "Output 0 of BackwardHookFunction is a view and is being
modified inplace" (pytorch issue 61519).

Each call of a selected module gets a private autograd node for its input, so the
gradient found there is this module's ``grad_input`` alone, and the caller downstream
gets a clone of the output, so a later in-place op cannot overwrite the recorded value.
When nothing upstream needs a gradient (frozen parameters, an image without
``requires_grad``), the first recorded input becomes a leaf: no graph is built before it
and back-propagation stops there.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from hookviz.anatomy.layers import LayerSpec, first_tensor, resolve_layers
from hookviz.errors import RecordingError, UnknownLayerError, arg
from hookviz.hooks import HookSet

__all__ = ["record", "Recording", "Capture"]


@dataclass(frozen=True)
class Capture:
    """What one call of one layer saw.

    Attributes:
        name: canonical name: the dotted path, with ``:K`` when the module ran several times.
        requested: the ``--layer`` text that selected it.
        module_type: the module's class name.
        input: the first positional input, as it was when the module was called.
        output: the output (the first tensor of a tuple output).
        grad_input: d(objective)/d(input) through this module alone, or ``None``.
        grad_output: d(objective)/d(output), or ``None`` when the objective does not depend on it.
    """

    name: str
    requested: str
    module_type: str
    input: "object" = None
    output: "object" = None
    grad_input: "object" = None
    grad_output: "object" = None


@dataclass
class _Call:
    spec: LayerSpec
    index: int
    input_node: "object" = None
    input_version: int = 0
    output_node: "object" = None
    grad_input: "object" = None
    grad_output: "object" = None
    calls_of_module: list = field(default_factory=lambda: [0])  # shared per module


def _is_float_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.is_floating_point()


class Recording:
    """Context manager that records the selected layers of ``model``.

    Use ``hookviz.record(model, ["layer3.-1"])``. Inside the ``with`` block run the model
    and either your own ``loss.backward()`` (tensor hooks catch the gradients) or
    ``rec.backward(objective)``. Afterwards ``rec["layer3.-1"]`` is a ``Capture``.
    """

    def __init__(self, model, layers: Sequence[LayerSpec | str]):
        self.model = model
        strings = [layer for layer in layers if isinstance(layer, str)]
        self.specs: list[LayerSpec] = [layer for layer in layers if isinstance(layer, LayerSpec)]
        if strings:
            self.specs += resolve_layers(model, strings)
        self._calls: list[_Call] = []
        self._counters: list[list[int]] = []
        self._count_of: dict[str, list[int]] = {}  # module path -> its calls in the current pass
        self._hooks = HookSet()
        self._store_from_hooks = True

    # -- lifecycle

    def __enter__(self) -> "Recording":
        modules = dict(self.model.named_modules())
        by_path: dict[str, list[LayerSpec]] = {}
        for spec in self.specs:
            by_path.setdefault(spec.path, []).append(spec)
        try:
            # Each forward pass of the whole model starts a fresh recording.
            self._hooks.add(self.model.register_forward_pre_hook(lambda _m, _a: self._new_pass()))
            for path, specs in by_path.items():
                self._hook_module(modules[path], specs)
        except BaseException:
            self._hooks.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info) -> bool:
        self._hooks.__exit__(*exc_info)
        return False

    def _new_pass(self) -> None:
        self._calls = []
        for counter in self._counters:
            counter[0] = 0

    # -- hooks

    def _hook_module(self, module, specs: list[LayerSpec]) -> None:
        counter = [0]  # calls of this module in the current forward pass
        self._counters.append(counter)
        self._count_of[specs[0].path] = counter
        stack: list[_Call | None] = []
        wanted_all = any(s.call is None for s in specs)
        by_call = {s.call: s for s in specs if s.call is not None}
        inplace = bool(getattr(module, "inplace", False))

        def pre_hook(_module, args):
            index = counter[0]
            counter[0] += 1
            spec = specs[0] if wanted_all else by_call.get(index)
            if spec is None:
                stack.append(None)
                return None
            call = _Call(spec=spec, index=index, calls_of_module=counter)
            self._calls.append(call)
            stack.append(call)
            return self._record_input(call, args, inplace)

        def forward_hook(_module, _args, output):
            call = stack.pop() if stack else None
            return None if call is None else self._record_output(call, output)

        self._hooks.add(module.register_forward_pre_hook(pre_hook))
        self._hooks.add(module.register_forward_hook(forward_hook))

    def _record_input(self, call: _Call, args, inplace: bool):
        """Watch the input of a recorded call; the args the module then gets (``None``: as they were)."""
        import torch

        if not args or not _is_float_tensor(args[0]):
            return None
        x = args[0]
        if not torch.is_grad_enabled():
            node = x.detach()
        elif x.requires_grad:
            node = x.view_as(x)  # a node of our own: its gradient flows through this module only
        else:
            node = x.detach().requires_grad_(True)  # nothing upstream needs a gradient: start here
        call.input_node = node
        call.input_version = node._version
        self._watch(node, call, "grad_input")
        # An in-place module (ReLU(inplace=True)) would overwrite the recorded input.
        feed = node.clone() if inplace else node
        return (feed, *args[1:])

    def _record_output(self, call: _Call, output):
        """Watch the output of a recorded call; what the rest of the model then gets (``None``:
        the output as it was, for a call left out)."""
        import torch

        if call.input_node is not None and call.input_node._version != call.input_version:
            raise RecordingError(
                f"layer {call.spec.path} ({call.spec.module_type}) modified its input in place, "
                "so its input cannot be recorded; select the layer before it instead"
            )
        tensor = output if _is_float_tensor(output) else _first_float(output)
        if not self._recordable(call, output, tensor):
            return None
        if torch.is_grad_enabled() and not tensor.requires_grad:
            # its input was no tensor (a YOLO Concat's list) and nothing upstream needs a
            # gradient, so no leaf was made before it: its output is where the graph starts
            leaf = tensor.detach().requires_grad_(True)
            output, tensor = _replace_first(output, tensor, leaf), leaf
        call.output_node = tensor
        self._watch(tensor, call, "grad_output")
        # Downstream gets a copy: an in-place op after this layer would overwrite the recorded output.
        return _replace_first(output, tensor, tensor.clone())

    def _recordable(self, call: _Call, output, tensor) -> bool:
        """Whether ``tensor`` (``output``'s float tensor, or ``None``) can be recorded as the call's
        map; a layer named outright that cannot is refused, one a pattern picked is left out."""
        why = None
        if tensor is None:
            why = f"its output ({type(output).__name__}) holds no floating-point tensor"
        elif not _is_float_tensor(output) and len(set(_map_sizes(output))) > 1:
            why = _pyramid_message(self.model, call.spec, output)
        if why is None:
            return True
        if call.spec.explicit:
            raise UnknownLayerError(
                why
                if why.startswith(arg("layers"))
                else f"{arg('layers', call.spec.requested)}: {call.spec.path}: {why}; record another layer"
            )
        self._calls.remove(call)  # a pattern or type picked it: left out, and the run notes it
        return False

    def _watch(self, tensor, call: _Call, slot: str) -> None:
        if not tensor.requires_grad:
            return

        def grab(grad):
            if self._store_from_hooks:
                setattr(call, slot, grad.detach())

        self._hooks.add(tensor.register_hook(grab))

    # -- gradients

    def gradients(self, objective, *, inputs: bool = True, retain_graph: bool = False) -> list[tuple]:
        """d(objective)/d(recorded tensors), without storing them.

        Back-propagation runs only down to the earliest recorded tensor.

        Returns:
            One ``(grad_input, grad_output)`` pair per recorded call, in ``calls`` order
            (``None`` where the objective does not reach the tensor).
        """
        import torch

        nodes, slots = [], []
        for position, call in enumerate(self._calls):
            if inputs and call.input_node is not None and call.input_node.requires_grad:
                nodes.append(call.input_node)
                slots.append((position, 0))
            if call.output_node is not None and call.output_node.requires_grad:
                nodes.append(call.output_node)
                slots.append((position, 1))
        pairs = [[None, None] for _ in self._calls]
        if not nodes or not objective.requires_grad:
            return [tuple(p) for p in pairs]
        self._store_from_hooks = False
        try:
            grads = torch.autograd.grad(objective, nodes, retain_graph=retain_graph, allow_unused=True)
        finally:
            self._store_from_hooks = True
        for (position, which), grad in zip(slots, grads):
            pairs[position][which] = grad
        return [tuple(p) for p in pairs]

    def backward(self, objective, *, retain_graph: bool = False) -> None:
        """Compute and store every recorded call's ``grad_input`` and ``grad_output``."""
        for call, (grad_in, grad_out) in zip(self._calls, self.gradients(objective, retain_graph=retain_graph)):
            call.grad_input, call.grad_output = grad_in, grad_out

    # -- results

    def check_complete(self) -> list[LayerSpec]:
        """Check that the forward pass called every selected layer.

        Returns:
            The layers a pattern or a type selected that never ran (auxiliary heads in eval
            mode): they are left out, and the caller notes them.

        Raises:
            UnknownLayerError: a layer named by its own path never ran (or not that often),
                or nothing selected ran at all.
        """
        seen = {(c.spec.path, c.spec.call) for c in self._calls}
        skipped = []
        for spec in self.specs:
            if (spec.path, spec.call) in seen:
                continue
            if not spec.explicit:
                skipped.append(spec)
                continue
            if spec.call is not None:
                calls = self._count_of.get(spec.path, [0])[0]
                ran = f"was called {calls} time{'s' if calls != 1 else ''}" if calls else "was never called"
                raise UnknownLayerError(f"{arg('layers', spec.requested)}: {spec.path} {ran} in the forward pass")
            raise UnknownLayerError(
                f"{arg('layers', spec.requested)}: {spec.path} was never called in the forward pass; pick another layer"
            )
        if self.specs and not self._calls:
            asked = ", ".join(dict.fromkeys(s.requested for s in self.specs))
            raise UnknownLayerError(f"{arg('layers', asked)}: none of the selected modules ran in the forward pass")
        return skipped

    @property
    def captures(self) -> list[Capture]:
        """Every recorded call, in the order the calls began."""
        result = []
        for call in self._calls:
            if call.input_node is not None and call.input_node._version != call.input_version:
                raise RecordingError(
                    f"the input of {call.spec.path} was modified in place after the layer ran, "
                    "so its recorded value is lost; select another layer"
                )
            total = call.calls_of_module[0]
            name = f"{call.spec.path}:{call.index}" if total > 1 or call.spec.call is not None else call.spec.path
            result.append(
                Capture(
                    name=name,
                    requested=call.spec.requested,
                    module_type=call.spec.module_type,
                    input=None if call.input_node is None else call.input_node.detach(),
                    output=None if call.output_node is None else call.output_node.detach(),
                    grad_input=call.grad_input,
                    grad_output=call.grad_output,
                )
            )
        return result

    def __getitem__(self, name: str) -> Capture:
        captures = self.captures
        for capture in captures:
            if name == capture.name:
                return capture
        matches = [c for c in captures if name in (c.requested, c.name.split(":")[0])]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise KeyError(f"{name!r} ran {len(matches)} times; ask for one call: " + ", ".join(repr(c.name) for c in matches))
        raise KeyError(f"{name!r} was not recorded; recorded: " + ", ".join(repr(c.name) for c in captures))

    def __iter__(self):
        return iter(self.captures)


def record(model, layers: Sequence[str | LayerSpec]) -> Recording:
    """Record the inputs, outputs and gradients of ``layers`` of ``model``.

    Example::

        with hookviz.record(model, ["layer3.-1"]) as rec:
            loss = criterion(model(x), y)
            loss.backward()
        rec["layer3.-1"].grad_output

    Args:
        model: any ``torch.nn.Module``.
        layers: dotted paths (``layer3.-1``, ``features.18``, ``layer3.5.relu:1``) or globs.

    Returns:
        A ``Recording`` context manager; its hooks are removed when the block ends.

    Raises:
        UnknownLayerError: a path matches no module.
    """
    return Recording(model, layers)


def _map_sizes(value) -> list[tuple[int, int]]:
    """The spatial sizes of the 4-D tensors (feature maps) a container output holds: a
    feature pyramid's levels have several, which no one map stands for."""
    import torch

    if isinstance(value, torch.Tensor):
        return [tuple(value.shape[-2:])] if value.dim() == 4 else []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    return [size for item in items for size in _map_sizes(item)]


def _pyramid_message(model, spec: LayerSpec, output) -> str:
    """Why a layer returning several feature maps (an FPN's levels) is refused, and which to take."""
    import torch.nn as nn

    modules = dict(model.named_modules())
    convs = [p for p, m in modules.items() if p.startswith(spec.path + ".") and isinstance(m, nn.Conv2d)]
    body = next((p for p in (f"{spec.path}.body", f"{spec.path.rsplit('.', 1)[0]}.body") if p in modules), None)
    suggestions = ([f"{body}.{list(modules[body].named_children())[-1][0]}"] if body else []) + convs[-2:]
    such = (
        f"; record a layer with one output instead, such as {' or '.join(suggestions)}"
        if suggestions
        else "; record a layer with one feature map instead"
    )
    return (
        f"{arg('layers', spec.requested)}: {spec.path} returns {len(_map_sizes(output))} feature maps of "
        f"{len(set(_map_sizes(output)))} sizes (a feature pyramid?), not one{such}"
    )


def _first_float(value):
    tensor = first_tensor(value)
    return tensor if tensor is not None and tensor.is_floating_point() else None


def _replace_first(output, old, new):
    """``output`` with ``old`` replaced by ``new`` wherever it first occurs, each container
    keeping its own type: a namedtuple stays that namedtuple, a dict subclass (transformers'
    ``ModelOutput``) that subclass with its attributes, so the parent module still reads
    ``outputs.last_hidden_state``."""
    if output is old:
        return new
    if isinstance(output, (tuple, list)):
        for i, item in enumerate(output):
            replaced = _replace_first(item, old, new)
            if replaced is not item:
                return _with_item(output, i, replaced)
        return output
    if isinstance(output, dict):
        for key, item in output.items():
            replaced = _replace_first(item, old, new)
            if replaced is not item:
                return _with_item(output, key, replaced)
    return output


def _with_item(container, key, value):
    if isinstance(container, tuple):
        items = list(container)
        items[key] = value
        if hasattr(container, "_fields"):  # a namedtuple
            return type(container)(*items)
        return tuple(items) if type(container) is tuple else type(container)(items)
    try:
        changed = copy.copy(container)  # same type, same attributes
    except Exception:  # a container that cannot be copied: change the fresh output in place
        changed = container
    changed[key] = value  # ModelOutput's __setitem__ updates its attribute too
    return changed
