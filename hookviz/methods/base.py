"""The interface every CAM method meets: what it needs from the pass, and the map it makes.

A method is a ``Method``: a name, what it needs (the gradient of the target's score at the
layer, the model's input batch, extra forward passes that re-score altered inputs or the
layer's altered output, the gradient of the score with respect to the input, Hessian-vector
products of the score at the layer) and a
``compute(ctx)`` that turns a ``MethodContext`` into one raw map per image.

A method's ``resolution`` says what kind of map it makes. A ``layer`` method (Grad-CAM)
makes one map per image at the layer's resolution, (N, *spatial), and runs once per
recorded layer. An ``input`` method (guided backprop, integrated gradients) makes one map
per image at the input's resolution with the input's channels, (N, C, *spatial) as the
input is (a photo's (N, C, H, W), a signal's (N, C, L), a clip's (N, C, T, H, W)), and runs
once per batch, given the context of the first recorded layer that has a map, in the
forward pass's order (guided Grad-CAM combines that layer's Grad-CAM with guided backprop). The pass
(``hookviz.explaining.passes``) owns hooks, gradients and the model; it hands each method only what
it declares, so a method that needs no gradient also explains a layer the target's score
never reaches. Like pytorch-grad-cam's ``get_cam_weights(input, layer, targets, activations,
grads)`` with its ``uses_gradients`` flag, a method never learns the task: ``ctx.score`` is
the task's own word on what the target's score is (see ``hookviz.tasks.base``).

A sample may be several inputs (a photo and a vector, an RGB image and its depth). ``ctx.inputs``
is the main one; an ``input`` method maps the others too, as captum attributes a tuple of inputs:
it reads them with ``ctx.input_gradient.others()``, moves them with the main one in
``ctx.input_gradient.along(...)`` (``InputGradient``) and returns ``MapFigures(maps, figures,
inputs)``. One that maps the main input alone of such a model is refused in one line.

Example, a method of one's own, then ``hookviz run --cam activation-sum`` in that process::

    from hookviz.methods import register_method

    @register_method("activation-sum", needs_gradients=False)
    def activation_sum(ctx):
        \"\"\"The layer's channels summed, after a ReLU.\"\"\"
        return ctx.activations.sum(dim=1).clamp(min=0)

A method with settings of its own declares them as a frozen dataclass (``options=``, see
``hookviz.options.declared``): ``hookviz run`` then takes them as flags, ``explain()`` as
keywords, and the method reads the run's values as ``ctx.settings``.

Nothing here imports torch: ``hookviz --help`` lists the methods without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields as dataclass_fields, replace
from typing import TYPE_CHECKING, Any, Protocol

from hookviz.errors import HookvizError, UsageError
from hookviz.registry import Registry, built_in

if TYPE_CHECKING:
    import torch

__all__ = [
    "METHODS",
    "ExtraPasses",
    "InputGradient",
    "MapFigures",
    "RESCORING_BATCH",
    "RESOLUTIONS",
    "Method",
    "MethodContext",
    "NoMap",
    "get_method",
    "method_names",
    "register_method",
]

#: At most this many altered inputs go through the model in one re-scoring pass (fewer where
#: the memory budget, ``hookviz.budget``, holds fewer).
RESCORING_BATCH = 32
#: What a method's map is: one map per image at the layer's resolution, or one map per
#: image and input channel at the input's resolution.
RESOLUTIONS = ("layer", "input")


class NoMap(HookvizError):
    """Raised by a ``layer`` method's function: the method has no map of this layer, for the reason
    ``str(error)`` gives (CAM at a layer the classifier does not read through a global pool). The
    layer's report then says ``no CAM: <reason>``, as for a layer the target does not reach, and the
    run goes on with the other layers and methods."""


class InputGradient(Protocol):
    """``ctx.input_gradient``: gradients of each row's target score with respect to the model's
    inputs. A sample may be several inputs (``hookviz.samples.multi``: an RGB image and its
    depth), which the model takes together; the main one is ``ctx.inputs``, the one maps are
    drawn for. An input method that attributes every input, as captum's attributions of a tuple
    of inputs do, reads the others with ``others()`` and moves them with the main one in
    ``along``; one that calls only ``input_gradient(batch)`` attributes the main input alone,
    the others held as the sample has them.

    Attributes:
        main: the main input's name (``image`` for a photo).
    """

    main: str

    def __call__(
        self, batch, images=None, guided: bool = False, within=None, from_scores: bool = False, with_scores: bool = False
    ) -> Any:
        """d(row's target score)/d(row) for each row of ``batch`` (M, C, *spatial), the main
        input of image ``images[row]`` replaced by the row (see ``MethodContext.input_gradient``)."""
        ...

    def others(self) -> dict[str, torch.Tensor]:
        """The batch's other inputs, by name, each stacked (N, ...) on the model's device in its
        dtype; ``{}`` for a sample of one input."""
        ...

    def along(self, main, others: dict, images, guided: bool = False) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """For rows ``main`` (M, ...) of the main input and ``others`` (name -> (M, ...)), each
        row standing for image ``images[row]``, all inputs replaced together: ``(main's
        gradients, {name: gradients}, scores (M,))``, float32, as captum's gradients of a tuple
        of inputs; ``guided``: through guided ReLUs."""
        ...


@dataclass(frozen=True)
class ExtraPasses:
    """The extra passes a method declared (``Method.needs_*``), each ``None`` unless declared: the
    pass builds only what a method asks for, so a method never pays for another's passes.

    Attributes:
        score: ``needs_rescoring``: ``score(batch, images=None)`` runs the model on ``batch``
            (M, C, *spatial, as ``ctx.inputs``) under ``torch.inference_mode`` (at most
            ``RESCORING_BATCH`` rows a pass, fewer where the memory budget, ``hookviz.budget``, holds
            fewer) and returns, per row, the score of the target of image ``images[row]`` (default:
            row ``i`` is image ``i``) as the task defines it: a classifier's class logit, the mean logit
            of a segmentation class over its predicted pixels, a detection's matched box score. It
            returns (M,) float32; 0 for an image with nothing to explain.
        score_layer: ``needs_rescoring``: ``score_layer(activations, images)`` runs the model on the
            input of image ``images[row]`` with this layer's output replaced by ``activations[row]``
            (channels first, as ``ctx.activations``; the pass lays it out as the layer does), and
            returns each row's target score, as ``score`` does.
        input_gradient: ``needs_input_gradients``: an ``InputGradient``, called as
            ``input_gradient(batch, images=None, guided=False, within=None, from_scores=False, with_scores=False)``:
            d(row's target score)/d(row) for each row of ``batch`` (M, C, *spatial, as ``ctx.inputs``), the
            same shape, float32, from forward and backward passes of ``RESCORING_BATCH`` rows at most,
            within the memory budget; with ``guided=True`` every ``nn.ReLU`` passes back only
            positive gradients (guided backprop), through hooks removed when it returns (it
            raises UsageError when the model has no ``nn.ReLU`` to guide). ``within(model)``:
            a context manager entered around the passes (relevance propagation's rules);
            ``from_scores=True``: each row's backward pass starts at its score, not 1;
            ``with_scores=True``: it returns ``(gradients, scores)``. A sample of several inputs:
            its ``others()`` and ``along()`` (see ``InputGradient``).
        layer_gradient: ``needs_layer_gradients``: ``layer_gradient(batch, images=None)``: for each row
            of a new input ``batch`` (M, C, *spatial) (noisy copies of the images, as Smooth Grad-CAM++
            makes), ``(activations, gradients)`` at this layer, each (M, C, *spatial) float32 as
            ``ctx.activations`` and ``ctx.gradients`` lie, from forward and backward passes within the
            memory budget.
        attention: ``needs_attention``: ``attention(gradients=None)`` returns the batch's
            ``hookviz.anatomy.attention.AttentionMaps`` (every attention block's probabilities, and with
            ``gradients="target"`` or ``"layers"`` their gradients), from one extra forward pass (and
            one backward pass with gradients).
        hessian_vector: ``needs_hessian``: ``hessian_vector(vectors)``, for ``vectors`` (N, C, *spatial)
            shaped as ``ctx.activations``: ``(gradients, products)``, each (N, C, *spatial) float32: per
            image ``n``, the gradient of its target score and ``H_n @ vectors[n]``, ``H_n`` that score's
            Hessian with respect to this layer's output (channels first) (ShapleyCAM's ``H A``). The
            score is the one ``score`` returns (a segmentation's mean logit over the class's pixels,
            where ``gradients`` are of their sum): use the two together. The main pass keeps no graph
            of its gradients, so each call runs its own forward pass with the layer's output made a
            leaf, a backward pass that keeps its graph and a second backward pass through it
            (``RESCORING_BATCH`` rows a pass at most, within the memory budget); zeros where the
            gradient does not depend on the layer's output (a network that is piecewise linear after
            the layer, as ReLU networks are, has ``H = 0``).
        contrast_gradient: ``needs_contrast``: ``contrast_gradient(spec)`` for a
            ``hookviz.tasks.base.Contrast``: d(contrast score)/d(activations), (N, C, *spatial) float32
            as ``gradients``, where the contrast score is the target's score set against the classes
            nearest it as the task defines it (``Task.contrast``: Finer-CAM's objective), from one more
            backward pass of the main pass's graph per ``spec`` (zeros where the score does not reach
            the layer); it returns ``None`` where the model has fewer than 2 classes to compare.
        layers: an ``input`` method that ``needs_gradients``: the context (activations, gradients,
            module, layer) of every recorded layer that has a map and a gradient, in the forward
            pass's order, the first being this context's own layer (RefineCAM multiplies their
            maps); ``()`` otherwise.
    """

    score: Callable[..., torch.Tensor] | None = None
    score_layer: Callable[..., torch.Tensor] | None = None
    input_gradient: InputGradient | None = None
    layer_gradient: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    attention: Callable[..., Any] | None = None
    hessian_vector: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    contrast_gradient: Callable[..., torch.Tensor | None] | None = None
    layers: tuple[MethodContext, ...] = ()

    def __repr__(self) -> str:
        given = [f.name for f in dataclass_fields(self) if getattr(self, f.name) not in (None, ())]
        return f"ExtraPasses({', '.join(given) or 'none'})"


@dataclass(frozen=True)
class MethodContext:
    """What the pass knows about one layer of one batch, for one target (one CAM key): what
    every method reads, and the extra passes the method declared (``passes``).

    Attributes:
        activations: the layer's output as a map, (N, C, *spatial), float32, channels first
            whatever the layer's own order (tokens on a grid, channels last). For an
            ``input`` method, the first mapped layer's; ``None`` when the run has none.
        gradients: d(target's score)/d(activations), the same shape; ``None`` unless the method
            ``needs_gradients``.
        module: the layer's ``nn.Module``.
        layer: the layer's name as reports spell it (``layer4``, ``blocks.3:1``).
        inputs: the model's main input batch, as the model took it (its device and dtype):
            (N, C, H, W) for photos, (N, C, L) for signals, (N, C, T, H, W) for clips; ``None``
            unless the method ``needs_input``. A sample of several inputs: see ``InputGradient``.
        settings: the run's values of the method's own option group (``Method.options``: integrated
            gradients' ``IGOptions``); ``None`` for a method without one (``Method.compute`` then gives
            a method that has one its defaults).
        model: the model the pass explains (``nn.Module``), given to every method, read-only: for a
            method that reads its parameters (CAM reads the classifier's weights, FullGrad every layer's
            bias) or hooks it within ``input_gradient``'s ``within``; a method must never change it (its
            mode, flags or parameters). ``None`` where a caller builds its own context without one.
        passes: the extra passes the method declared (``ExtraPasses``); each is also read as
            ``ctx.<name>`` (``ctx.score``, ``ctx.input_gradient``, ...), ``None`` where not declared.
    """

    activations: torch.Tensor
    gradients: torch.Tensor | None
    module: torch.nn.Module
    layer: str
    inputs: torch.Tensor | None = None
    settings: Any = None
    model: Any = None
    passes: ExtraPasses = ExtraPasses()

    @property
    def score(self) -> Callable[..., torch.Tensor] | None:
        """``passes.score`` (``needs_rescoring``)."""
        return self.passes.score

    @property
    def score_layer(self) -> Callable[..., torch.Tensor] | None:
        """``passes.score_layer`` (``needs_rescoring``)."""
        return self.passes.score_layer

    @property
    def input_gradient(self) -> InputGradient | None:
        """``passes.input_gradient`` (``needs_input_gradients``)."""
        return self.passes.input_gradient

    @property
    def layer_gradient(self) -> Callable[..., tuple[torch.Tensor, torch.Tensor]] | None:
        """``passes.layer_gradient`` (``needs_layer_gradients``)."""
        return self.passes.layer_gradient

    @property
    def attention(self) -> Callable[..., Any] | None:
        """``passes.attention`` (``needs_attention``)."""
        return self.passes.attention

    @property
    def hessian_vector(self) -> Callable[..., tuple[torch.Tensor, torch.Tensor]] | None:
        """``passes.hessian_vector`` (``needs_hessian``)."""
        return self.passes.hessian_vector

    @property
    def contrast_gradient(self) -> Callable[..., torch.Tensor | None] | None:
        """``passes.contrast_gradient`` (``needs_contrast``)."""
        return self.passes.contrast_gradient

    @property
    def layers(self) -> tuple[MethodContext, ...]:
        """``passes.layers`` (an ``input`` method that ``needs_gradients``)."""
        return self.passes.layers

    def __repr__(self) -> str:
        shape = "none" if self.activations is None else "x".join(map(str, self.activations.shape))
        given = [name for name in ("gradients", "inputs") if getattr(self, name) is not None]
        given += [f.name for f in dataclass_fields(self.passes) if getattr(self.passes, f.name) not in (None, ())]
        return f"MethodContext({self.layer!r}, activations {shape}, with {', '.join(given) or 'nothing else'})"


@dataclass(frozen=True)
class MapFigures:
    """What an ``input`` method may return instead of its maps alone: the maps, and per image
    figures about its map (relevance propagation's conservation), which the image's report
    keeps beside the map's statistics (``report.json``: ``pixel_maps.<method>.figures``).

    Attributes:
        maps: (N, C, *spatial), the input's shape, as the method's maps.
        figures: one dict per image, of names to numbers (a float; NaN is written null).
        inputs: a sample of several inputs' (``hookviz.samples.multi``): one dict per image, of
            each other input's name to its map (numpy, at its own shape); ``()``: none.
    """

    maps: torch.Tensor
    figures: tuple[dict[str, float], ...]
    inputs: tuple[dict, ...] = ()

    def __repr__(self) -> str:
        return f"MapFigures({'x'.join(map(str, self.maps.shape))}, figures {sorted(self.figures[0]) if self.figures else []})"


@dataclass(frozen=True)
class Method:
    """A CAM method. Make and register one with ``register_method``.

    Attributes:
        name: what ``--cam`` / ``cam=`` calls it.
        function: ``function(ctx) -> tensor``: the raw map, never resized or normalised; for
            a ``layer`` method (N, *spatial) at the layer's resolution, after a ReLU where the
            method has one; for an ``input`` method (N, C, *spatial), the input's shape, or
            those maps with figures about each (``MapFigures``).
        needs_gradients: ``ctx.gradients`` is given (the pass back-propagates each CAM's
            target); a layer the target does not reach then gets no CAM.
        needs_rescoring: ``ctx.score`` and ``ctx.score_layer`` are given (extra forward
            passes, no gradients).
        needs_input: ``ctx.inputs`` is given.
        needs_input_gradients: ``ctx.input_gradient`` is given (extra forward and backward
            passes).
        resolution: ``layer`` or ``input`` (see the module's docstring).
        class_specific: its map depends on the target (EigenCAM's does not, so ``--topk``
            with it first is refused).
        check: ``check(model)`` raises UsageError for a model the method cannot explain
            (guided backprop, a model without ``nn.ReLU``); ``Explainer.create`` calls it
            before any image is read. ``None``: every model.
        caveat: ``caveat(input, settings)`` for one sample's main input (1, C, *spatial) and the run's values
            of its option group (``options``; ``None`` without one): what a reader of that image's
            map must know (an integrated gradients baseline equal to the input makes it zero),
            said in a note, or ``None``.
        options: its option group (a frozen dataclass, ``hookviz.options.declared``), or ``None``:
            ``hookviz run`` takes its fields as flags, ``explain()`` as keywords; the method reads
            them as ``ctx.settings``. One given while no method that declares it is asked is refused.
        needs_attention: ``ctx.attention`` is given (every attention block's probabilities,
            from an extra pass with the model's fused attention switched off for it); the
            explainer refuses a model whose attention blocks cannot be reached before any image.
        needs_hessian: ``ctx.hessian_vector`` is given (Hessian-vector products at the layer, from
            an extra forward pass and two backward passes per call; no other method pays for them).
        needs_contrast: ``ctx.contrast_gradient`` is given (``layer`` methods; one more backward pass of
            the main pass per score asked); the explainer refuses a task without comparison classes
            (``Task.contrasts`` false: an embedding's, a detector's) before any image.
        needs_layer_gradients: ``ctx.layer_gradient`` is given (the layer's activations and gradients
            of new inputs: extra forward and backward passes).
    """

    name: str
    function: Callable[[MethodContext], torch.Tensor]
    needs_gradients: bool = True
    needs_rescoring: bool = False
    needs_input: bool = False
    needs_input_gradients: bool = False
    resolution: str = "layer"
    class_specific: bool = True
    check: Callable[[Any], None] | None = None
    caveat: Callable[[Any, Any], str | None] | None = None
    options: type | None = None
    needs_attention: bool = False
    needs_hessian: bool = False
    needs_contrast: bool = False
    needs_layer_gradients: bool = False

    def __post_init__(self):
        if self.resolution not in RESOLUTIONS:
            raise UsageError(f"method {self.name!r}: resolution {self.resolution!r}; choose {' or '.join(RESOLUTIONS)}")
        if self.needs_contrast and self.resolution != "layer":
            raise UsageError(f"method {self.name!r}: needs_contrast is given to layer methods only; make it resolution='layer'")
        if self.options is not None:
            from hookviz.options.declared import check_group

            check_group(self.options, f"method {self.name!r}")

    def compute(self, ctx: MethodContext) -> torch.Tensor:
        """The raw map of ``ctx``: (N, *spatial) for a ``layer`` method, (N, C, *spatial) for an ``input`` one;
        ``ctx.settings`` is the run's values of the method's option group, its defaults where the
        context holds none (a caller that builds its own context)."""
        if ctx.settings is not None or self.options is None:
            return self.function(ctx)
        return self.function(replace(ctx, settings=self.settings(None)))

    def settings(self, options) -> Any:
        """The method's option group as the run's ``TargetOptions`` (``options``) hold it (its
        defaults when they hold none), or ``None`` for a method without one."""
        if self.options is None:
            return None
        held = getattr(options, "settings", ())
        return next((group for group in held if type(group) is self.options), None) or self.options()

    def note(self, image, options) -> str | None:
        """What a reader of ``image``'s map must know (``caveat``), under the run's ``TargetOptions``."""
        return None if self.caveat is None else self.caveat(image, self.settings(options))

    @property
    def summary(self) -> str:
        """The first line of the function's docstring."""
        return (self.function.__doc__ or "").strip().split("\n")[0]

    def __repr__(self) -> str:
        needs = [
            word
            for word, flag in (
                ("gradients", self.needs_gradients),
                ("rescoring", self.needs_rescoring),
                ("input", self.needs_input),
                ("input gradients", self.needs_input_gradients),
                ("attention", self.needs_attention),
                ("Hessian-vector products", self.needs_hessian),
                ("contrast gradients", self.needs_contrast),
                ("layer gradients", self.needs_layer_gradients),
            )
            if flag
        ]
        return f"Method({self.name!r}, {self.resolution} resolution, needs {', '.join(needs) or 'activations only'})"


#: The built-in methods' modules; --help lists the methods in this order, so it is not sorted by name.
_BUILT_IN = """
gradcam gradcam_plus_plus layercam xgradcam hirescam eigencam scorecam ablationcam
guided_backprop guided_gradcam integrated_gradients lrp attnlrp rollout chefer legrad
feature_ablation lime kernel_shap cam fullgrad refine_cam saliency input_x_gradient
deconvolution deeplift deeplift_shap gradient_shap gradcam_elementwise eigengradcam kpca_cam fem
random_cam shapley_cam sscam iscam rise occlusion finer_cam smoothgradcam_pp
"""
METHODS: Registry[Method] = Registry("cam", "method", extra_choices=("none",), modules=built_in("hookviz.methods", _BUILT_IN))


def register_method(name: str, **declared: Any) -> Callable[[Callable[[MethodContext], torch.Tensor]], Method]:
    """A decorator that makes a function of a ``MethodContext`` a ``Method`` named ``name``
    and registers it; the decorated name is then that ``Method``. The keywords are ``Method``'s
    fields but ``name`` and ``function`` (``needs_gradients=False``, ``resolution="input"``,
    ``options=IGOptions``), with its defaults.

    Raises:
        UsageError: ``name`` is taken (a method of that name, or ``none``), as torchvision's
            ``register_model`` refuses a second model of one name; a name with a comma (``--cam``
            lists names with commas); a keyword that is no field of ``Method``; a value
            ``Method`` refuses (a ``resolution`` other than ``layer`` or ``input``, an ``options``
            group that is no frozen dataclass with defaults or names another owner's setting).
    """
    METHODS.check_free(name)  # at the decorator's line, before the function is read: taken, or not one word
    fields = [f.name for f in dataclass_fields(Method) if f.name not in ("name", "function")]
    unknown = sorted(set(declared) - set(fields))
    if unknown:
        raise UsageError(f"method {name!r}: {', '.join(unknown)} is no field of Method; choose from {', '.join(fields)}")
    declared_method = Method(name, _undecorated, **declared)  # its checks, at the decorator's line too

    def wrap(function: Callable[[MethodContext], torch.Tensor]) -> Method:
        return METHODS.add(name, replace(declared_method, function=function))

    return wrap


def _undecorated(ctx: MethodContext) -> torch.Tensor:
    raise AssertionError("register_method's function, before the decorator has read it")


def get_method(name: str) -> Method:
    """The method called ``name``. Raises UsageError (with a did-you-mean) for an unknown name."""
    return METHODS.get(name)


def method_names() -> list[str]:
    """The registered methods' names, in the order they were registered."""
    return METHODS.names()
