"""The relevance maps the atlas's ``relevance`` ranking reads (``--relevance CLASS|predicted``):
per batch, each recorded layer's relevance for the class asked (each sample's predicted class,
or one class for all), ``(B, C, *grid)``, by name. Summed over positions it is the channel's
contribution to the class's score (``hookviz.concepts.relevance``), and its largest unit is
where the example is shown.

- ``gradient-x-activation``: in the collection's own pass, the layer's output times the class
  score's gradient there: one backward pass for all the layers.
- ``lrp``: a pass of its own under zennit's composite, started at the class's logit (zennit-crp's
  initial relevance): its canonizers change what some layers compute forward (a convolution
  merged with its batch norm), so the activations the statistics read come from the plain pass.
"""

from __future__ import annotations

from typing import Any

from hookviz.atlas.plan import AtlasPlan
from hookviz.errors import UsageError, arg

__all__ = ["class_logits", "gradient_relevance", "lrp_relevance", "check_relevance"]


def class_logits(plan: AtlasPlan, output) -> tuple[Any, Any]:
    """The batch's class scores ``(B, classes)`` and the class to explain for each row.

    Raises:
        UsageError: the model's output is no (batch, classes) tensor, or has no such class.
    """
    import torch

    from hookviz.concepts.relevance import predicted_or_named

    asked = plan.request.relevance
    logits = output if torch.is_tensor(output) else next((t for t in output if torch.is_tensor(t)), None)
    if logits is None or logits.dim() != 2:
        shape = None if logits is None else tuple(logits.shape)
        raise UsageError(
            f"{arg('relevance', asked)}: the model's output is {shape}, not class scores (batch, classes); "
            "relevance needs a classifier"
        )
    chosen = predicted_or_named(logits, _class(asked), plan.model.categories or ())
    return logits, torch.as_tensor(chosen, dtype=torch.long, device=logits.device)


def _class(asked):
    return int(asked) if isinstance(asked, str) and asked.isdigit() else asked


def check_relevance(plan: AtlasPlan) -> None:
    """Refuse, before any work, a class the model's categories lack and a model zennit's rules
    do not cover (``lrp``); a class index is checked against the output at the first batch
    when the model names no categories.

    Raises:
        UsageError: in one line.
    """
    import torch

    from hookviz.concepts.relevance import predicted_or_named

    request = plan.request
    if request.relevance is None:
        return
    categories = plan.model.categories or ()
    if not categories and request.relevance != "predicted" and not str(request.relevance).isdigit():
        raise UsageError(f"{arg('relevance', request.relevance)}: the model names no classes; give predicted or a class index")
    with torch.no_grad():  # one blank sample: the output's classes, before any work
        blank = tuple(
            t.to(request.device) if hasattr(t, "to") else t for t in plan.kind.blank(plan.model.preprocessing, plan.settings)
        )
        logits, _ = class_logits(plan, plan.model.module(*blank))
    predicted_or_named(torch.zeros(1, logits.shape[1]), _class(request.relevance), categories)
    if request.relevance_rule == "lrp":
        from hookviz.methods.lrp import check_lrp

        try:
            check_lrp(plan.model.module)
        except UsageError as exc:
            raise UsageError(str(exc).replace(arg("cam", "lrp"), arg("relevance_rule", "lrp"), 1)) from None


def gradient_relevance(plan: AtlasPlan, output, recording) -> dict[str, Any]:
    """Gradient x activation at each recorded layer, from the pass that gave ``output``."""
    import torch

    logits, picked = class_logits(plan, output)
    objective = logits.gather(1, picked[:, None]).sum()
    pairs = recording.gradients(objective, inputs=False)
    return {
        capture.name: capture.output * grad if grad is not None else torch.zeros_like(capture.output)
        for capture, (_, grad) in zip(recording.captures, pairs)
    }


def lrp_relevance(plan: AtlasPlan, samples) -> dict[str, Any]:
    """LRP's relevance at each layer of ``plan``, by a pass of its own over ``samples``."""
    import torch

    from hookviz.concepts.relevance import lrp_objective
    from hookviz.explaining.recording import record
    from hookviz.methods.lrp import LrpSettings, composite_context
    from hookviz.modelstate import frozen_parameters

    module = plan.model.module
    within = composite_context(LrpSettings())
    with torch.enable_grad(), frozen_parameters(module), within(module), record(module, list(plan.specs)) as recording:
        logits, picked = class_logits(plan, plan.forward(samples))
        pairs = recording.gradients(lrp_objective(logits, picked), inputs=False)
        captures = recording.captures
    found: dict[str, Any] = {}
    for capture, (_, grad) in zip(captures, pairs):
        found[capture.name] = grad if grad is not None else torch.zeros_like(capture.output)  # type: ignore[arg-type]
    return found
