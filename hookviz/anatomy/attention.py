"""Attention access: where a model's attention blocks are, and their probabilities for a pass.

Fused ``scaled_dot_product_attention`` kernels never materialise the attention probabilities
that attention rollout, Chefer et al.'s relevance and LeGrad read. Each library that builds
vision transformers says where its attention is computed: a model's source declares its
blocks when it loads it (``DeclaredAttention``, read by ``hookviz.anatomy.attention_blocks``,
as ``geometry`` reads token layouts), and a factory's model, which no source declares for,
is read by its modules' types (``detected_attention``). Each block is reached one of four ways:

* timm: an attention module with a ``fused_attn`` flag and an ``attn_drop`` dropout after its
  softmax (``vision_transformer.Attention`` and its kin). The flag is switched off for the pass
  and the dropout's output, the probabilities the values are mixed with, is recorded.
* torch's ``nn.MultiheadAttention`` (torchvision's ViT, open_clip's towers): asked for its
  per-head weights for the pass (``need_weights=True, average_attn_weights=False``) and its
  output recomputed from them (``out_proj(A @ V)``, as torch-cam's LeGrad does), so that the
  recorded weights are the ones the block's output is made of.
* Hugging Face transformers: an attention module returning ``(output, weights)`` whose config
  picks its kernel; ``attn_implementation`` is switched to ``eager`` for the pass.
* open_clip's own ``Attention`` (its ``custom`` blocks), whose unfused path fails on its 4-D
  heads: its probabilities are recomputed from its query and key, and its output made again
  of them, as for ``nn.MultiheadAttention``.

A model with a text tower (a CLIP) is explained through its image tower: only the attention
under its ``visual`` or ``vision_model`` module is read. Every switch and hook is undone when
the block ends, on error too, so the caller's model and process are left as found.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hookviz.errors import UsageError, arg
from hookviz.hooks import HookSet

__all__ = [
    "AttentionSite",
    "AttentionMaps",
    "DeclaredAttention",
    "RecordedAttention",
    "KINDS",
    "attention_sites",
    "detected_attention",
    "unreachable_text",
    "attention_recorded",
    "has_class_token",
]

#: What an image tower of a model with a text tower is called (open_clip's, transformers' CLIP).
_IMAGE_TOWERS = ("visual", "vision_model")
#: How a block's probabilities are reached: timm's ``fused_attn`` switched off, transformers'
#: ``attn_implementation`` switched to eager, ``nn.MultiheadAttention`` asked for its weights,
#: or (open_clip's own ``Attention``, whose unfused path fails on its 4-D heads) recomputed
#: from its query and key, its output made again of them.
KINDS = ("timm", "transformers", "multihead", "open_clip")


@dataclass(frozen=True)
class AttentionSite:
    """One attention block of a model.

    Attributes:
        path: the attention module's name (``blocks.3.attn``).
        block: the block it belongs to, whose output is the residual stream (``blocks.3``).
        kind: how its probabilities are reached, one of ``KINDS``.
    """

    path: str
    block: str
    kind: str


@dataclass(frozen=True)
class AttentionMaps:
    """Every attention block's probabilities for one batch, in the forward pass's order.

    Attributes:
        probabilities: per block, (N, heads, T, T) float32: row ``i`` is how token ``i`` mixes
            the tokens it attends to (each row sums to 1).
        gradients: per block, the gradient of the target's score with respect to those
            probabilities (``"target"``), or of the score the block's own output would give
            through the model's head (``"layers"``, LeGrad's); ``None`` without gradients.
        prefix: the tokens before the patch tokens, as the model declares them (``None``: undeclared).
        class_token: whether the first token is a class token (timm's ``has_class_token``; a
            model that does not say has one, as torchvision's, open_clip's and transformers' ViTs do).
    """

    probabilities: tuple
    gradients: tuple | None = None
    prefix: int | None = None
    class_token: bool = True

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.probabilities[0].shape)) if self.probabilities else "none"
        return f"AttentionMaps({len(self.probabilities)} blocks of {shape}, gradients={self.gradients is not None})"


@dataclass(frozen=True)
class DeclaredAttention:
    """Where a model's attention blocks are and how each is reached, as its source declares
    them (``hookviz.anatomy.attention_blocks``) or as ``detected_attention`` finds them.

    Attributes:
        sites: the blocks, in forward order (empty: the model computes no attention).
        refused: why the model's attention cannot be read, in words that name the module
            (``None``: every block is reachable).
        origin: what was read, for reports and messages.
    """

    sites: tuple = ()
    refused: str | None = None
    origin: str = ""


def attention_sites(model, method: str, declared: DeclaredAttention | None = None) -> tuple[AttentionSite, ...]:
    """The attention blocks of ``model`` (an ``nn.Module``) that ``method`` can read: those its
    source declares (``declared``), else those ``detected_attention`` finds (a factory's model).

    Raises:
        UsageError: the model has no attention block hookviz can reach (a CNN), or computes
            attention in a module none of the libraries above declares (fused, unreachable).
    """
    found = declared if declared is not None else detected_attention(model)
    if found.refused is not None:
        raise UsageError(
            f"{arg('cam', method)}: {type(model).__name__} {found.refused}; choose a gradient method such as gradcam"
        )
    if not found.sites:
        raise UsageError(
            f"{arg('cam', method)}: {type(model).__name__} has no attention blocks (timm's Attention, "
            "nn.MultiheadAttention, transformers' attention); it reads a vision transformer's attention, "
            "so choose a CAM method such as gradcam"
        )
    return tuple(found.sites)


def detected_attention(model, kinds: tuple[str, ...] = KINDS, origin: str = "detected from module types") -> DeclaredAttention:
    """The attention blocks of ``model`` found by their modules' types (``kinds`` among
    ``KINDS``), under its image tower when it has a text tower, in registration order (the
    forward order of every ViT these libraries build); ``refused`` names an attention module
    that none of them reaches."""
    tower = _image_tower(model)
    sites: list[AttentionSite] = []
    unreachable: list[tuple[str, str]] = []
    for path, module in model.named_modules():
        if tower and not (path == tower or path.startswith(tower + ".")):
            continue
        kind = _kind(module)
        kind = kind if kind in kinds else None
        if kind is not None and not any(path.startswith(site.path + ".") for site in sites):
            sites.append(AttentionSite(path, _block(model, path), kind))
        elif kind is None and "attention" in type(module).__name__.lower():
            unreachable.append((path, type(module).__name__))
    # An attention module that holds no reachable one (a block does) and is not reachable
    # itself would leave a hole in the rollout: the model is refused, naming it.
    lonely = [
        (p, n) for p, n in unreachable if n.lower().endswith("attention") and not any(s.path.startswith(p + ".") for s in sites)
    ]
    if lonely or (unreachable and not sites):
        path, name = (lonely or unreachable)[0]
        return DeclaredAttention(tuple(sites), unreachable_text(name, path, "fused, with no switch to turn off"), origin)
    return DeclaredAttention(tuple(sites), None, origin)


def unreachable_text(name: str, path: str, why: str) -> str:
    """The words that refuse a model for the attention module ``name`` at ``path``, after its type's name."""
    return f"computes attention in {name} ({path}), whose probabilities hookviz cannot reach ({why})"


def has_class_token(model) -> bool:
    """Whether the model's first token is a class token: what the first module that says
    (timm's ``has_class_token``) says, else ``True``."""
    said = next((m.has_class_token for m in model.modules() if isinstance(getattr(m, "has_class_token", None), bool)), None)
    return True if said is None else said


def _block(model, path: str) -> str:
    """The block of the attention module at ``path``: its parent, or itself where its parent
    is the list of blocks (timm's parallel blocks compute their attention themselves)."""
    import torch.nn as nn

    parent = path.rsplit(".", 1)[0] if "." in path else ""
    holder = model.get_submodule(parent)
    return path if isinstance(holder, (nn.Sequential, nn.ModuleList)) or not parent else parent


def _image_tower(model) -> str:
    """The image tower's path in a model with a text tower, else ``""`` (the whole model)."""
    for path, _ in model.named_modules():
        if path.rsplit(".", 1)[-1] in _IMAGE_TOWERS:
            return path
    return ""


def _kind(module) -> str | None:
    """How ``module``'s attention probabilities are reached, or ``None`` if it computes none."""
    import torch.nn as nn

    if isinstance(module, nn.MultiheadAttention):
        fits = module._qkv_same_embed_dim and module.bias_k is None and not module.add_zero_attn
        return "multihead" if fits else None
    library = type(module).__module__.split(".", 1)[0]
    if library == "timm" and hasattr(module, "fused_attn") and isinstance(getattr(module, "attn_drop", None), nn.Module):
        return "timm"
    config = getattr(module, "config", None)
    if library == "transformers" and config is not None and hasattr(config, "_attn_implementation"):
        named = type(module).__name__
        return "transformers" if named.endswith("Attention") and hasattr(module, "is_causal") else None
    if library == "open_clip" and type(module).__name__ == "Attention":
        return "open_clip" if getattr(module, "logit_scale", None) is None else None  # scaled cosine: see attention_blocks
    return None


@dataclass
class RecordedAttention:
    """What a pass under ``attention_recorded`` recorded: per block, its probabilities."""

    probabilities: list = field(default_factory=list)


@contextlib.contextmanager
def attention_recorded(model, sites, *, layers: bool = False) -> Iterator[RecordedAttention]:
    """For the block, every site's attention probabilities are computed (fused kernels off)
    and recorded, in call order, into the yielded ``RecordedAttention``.

    With ``layers``, each block's input is cut from the graph (a fresh leaf that needs a
    gradient) and the last block's output becomes every block's output stacked on the batch
    dimension (block by block, the last one's rows last): the model's head then scores each
    block's tokens, and one backward pass gives each block's probabilities the gradient of its
    own score only (LeGrad).

    Every flag is put back and every hook removed when the block ends, on error too.
    """
    recorded = RecordedAttention()
    with HookSet() as hooks, _switched(model, sites):
        for site in sites:
            module = model.get_submodule(site.path)
            _record(site, module, hooks, recorded)
        if layers:
            _stack_blocks(model, sites, hooks)
        yield recorded


@contextlib.contextmanager
def _switched(model, sites) -> Iterator[None]:
    """timm's ``fused_attn`` off and transformers' ``attn_implementation`` eager, then restored."""
    flags: list[tuple[Any, str, Any]] = []
    for site in sites:
        module = model.get_submodule(site.path)
        if site.kind == "timm":
            flags.append((module, "fused_attn", module.fused_attn))
        elif site.kind == "transformers":
            name = (
                "_attn_implementation_internal"
                if hasattr(module.config, "_attn_implementation_internal")
                else "_attn_implementation"
            )
            if not any(owner is module.config for owner, _, _ in flags):
                flags.append((module.config, name, getattr(module.config, name)))
    try:
        for owner, name, _ in flags:
            setattr(owner, name, False if name == "fused_attn" else "eager")
        yield
    finally:
        for owner, name, value in reversed(flags):
            setattr(owner, name, value)


def _record(site: AttentionSite, module, hooks: HookSet, recorded: RecordedAttention) -> None:
    if site.kind == "timm":
        hooks.add(module.attn_drop.register_forward_hook(lambda _m, _a, output: recorded.probabilities.append(output)))
    elif site.kind == "transformers":
        hooks.add(module.register_forward_hook(lambda _m, _a, output: recorded.probabilities.append(output[1])))
    elif site.kind == "open_clip":
        hooks.add(module.register_forward_hook(functools.partial(_open_clip_replay, recorded=recorded), with_kwargs=True))
    else:
        _multihead(module, hooks, recorded)


#: ``nn.MultiheadAttention.forward``'s positions of ``need_weights`` and ``average_attn_weights``,
#: the values hookviz asks for, and the module's defaults.
_ASKED = ((4, "need_weights", True, True), (6, "average_attn_weights", False, True))


def _multihead(module, hooks: HookSet, recorded: RecordedAttention) -> None:
    """Ask ``nn.MultiheadAttention`` for per-head weights, make its output of them, and
    return what its caller asked for."""
    asked: list[tuple] = []

    def ask(_module, args, kwargs):
        args, kwargs, wanted = list(args), dict(kwargs), []
        for position, name, value, default in _ASKED:
            if len(args) > position:
                wanted.append(args[position])
                args[position] = value
            else:
                wanted.append(kwargs.get(name, default))
                kwargs[name] = value
        asked.append(tuple(wanted))
        return tuple(args), kwargs

    def replay(_module, args, kwargs, output):
        need, average = asked.pop()
        weights = output[1]  # (N, heads, T, S): a view of the tensor the kernel used, so the output is made again of it
        recorded.probabilities.append(weights)
        value = args[2] if len(args) > 2 else kwargs["value"]
        out = _mixed(module, weights, value if module.batch_first else value.transpose(0, 1))
        out = out if module.batch_first else out.transpose(0, 1)
        return out, ((weights.mean(dim=1) if average else weights) if need else None)

    hooks.add(module.register_forward_pre_hook(ask, with_kwargs=True))
    hooks.add(module.register_forward_hook(replay, with_kwargs=True))


def _mixed(module, weights, value):
    """``out_proj(weights @ V)`` for a batch-first ``value`` (N, S, E), as the module computes it."""
    import torch.nn.functional as F

    count, keys, width = value.shape
    bias = None if module.in_proj_bias is None else module.in_proj_bias[2 * width :]
    mixed = F.linear(value, module.in_proj_weight[2 * width :], bias)
    mixed = mixed.reshape(count, keys, module.num_heads, width // module.num_heads).transpose(1, 2)
    return module.out_proj((weights @ mixed).transpose(1, 2).reshape(count, weights.shape[2], width))


def _open_clip_replay(module, args, kwargs, _output, *, recorded: RecordedAttention):
    """open_clip's ``Attention.forward`` (its fused path, without scaled cosine) written out
    with the probabilities in hand, recorded, and its output made again of them."""
    import torch
    import torch.nn.functional as F

    x = args[0]
    mask = args[1] if len(args) > 1 else kwargs.get("attn_mask")
    count, length, width = x.shape
    q, k, v = (
        t.reshape(count, length, module.num_heads, -1).transpose(1, 2)
        for t in F.linear(x, module.in_proj_weight, module.in_proj_bias).chunk(3, dim=-1)
    )
    logits = (module.ln_q(q) * module.scale) @ module.ln_k(k).transpose(-1, -2)
    if mask is not None:  # as open_clip reads it: (L, L) or (N * heads, L, L), boolean (True: masked) or additive
        mask = mask.reshape(count, module.num_heads, length, length) if mask.dim() == 3 else mask
        logits = logits.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else logits + mask.to(logits.dtype)
    weights = module.attn_drop(logits.softmax(dim=-1))
    recorded.probabilities.append(weights)
    mixed = weights @ v
    mixed = mixed if module.head_scale is None else mixed * module.head_scale
    return module.out_drop(module.out_proj(module.ln_inner(mixed.transpose(1, 2).reshape(count, length, width))))


def _stack_blocks(model, sites, hooks: HookSet) -> None:
    """Each block's input a fresh leaf; the last block's output every block's, stacked."""
    outputs: list = []
    batch_dim = 0 if sites[-1].kind != "multihead" or model.get_submodule(sites[-1].path).batch_first else 1

    def cut(_module, args):
        return (args[0].detach().requires_grad_(True), *args[1:])

    def keep(_module, _args, output):
        outputs.append(output[0] if isinstance(output, tuple) else output)

    def stacked(_module, _args, output):
        import torch

        tensor = output[0] if isinstance(output, tuple) else output
        every = torch.cat([*outputs[:-1], tensor], dim=batch_dim)
        return (every, *output[1:]) if isinstance(output, tuple) else every

    for site in sites:
        block = model.get_submodule(site.block)
        hooks.add(block.register_forward_pre_hook(cut))
        hooks.add(block.register_forward_hook(keep))
    hooks.add(model.get_submodule(sites[-1].block).register_forward_hook(stacked))
