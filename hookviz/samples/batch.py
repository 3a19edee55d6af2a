"""A batch of samples as the model's inputs, and the one place the task runs the model on
them: the main pass, the re-scoring of altered inputs (Score-CAM, Ablation-CAM), input
gradients (integrated gradients) and the trust measures all call ``SampleBatch.forward``, so
a sample of several inputs (a photo and a vector) reaches every pass whole, and every pass
runs with the task's own options."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ModelInputs", "SampleBatch"]


@dataclass(frozen=True)
class ModelInputs:
    """A batch's inputs, by name: per name, one tensor per row, without a batch dimension
    (a photo batch's may differ in size: a detector takes each photo as it is).

    Attributes:
        rows: per input name, the rows' tensors.
        main: the name of the input maps are made of (``image``).
        positional: the names passed to the model by position, in order (the others by
            keyword); ``None``: the main input alone, by position.
    """

    rows: dict
    main: str = "image"
    positional: tuple | None = None

    def __len__(self) -> int:
        return len(self.rows[self.main])

    def tensors(self, name: str | None = None) -> list:
        """The rows of input ``name`` (the main one by default)."""
        return list(self.rows[name or self.main])

    def stacked(self, name: str | None = None, device=None, dtype=None):
        """Input ``name`` (the main one by default) as one (N, ...) tensor on ``device``, in ``dtype``."""
        import torch

        return torch.stack(self.tensors(name)).to(device=device, dtype=dtype)

    def arguments(self, device=None, dtype=None) -> tuple[tuple, dict]:
        """The model's arguments: the positional inputs stacked, in order, and the keyword ones by name."""
        if self.positional is None:
            return (self.stacked(None, device, dtype),), {}
        keywords = {name: self.stacked(name, device, dtype) for name in self.rows if name not in self.positional}
        return tuple(self.stacked(name, device, dtype) for name in self.positional), keywords

    def batched(self, device=None, dtype=None) -> dict:
        """Every input stacked (``stacked``), by name."""
        return {name: self.stacked(name, device, dtype) for name in self.rows}


class SampleBatch:
    """The samples of one pass, and the model and task that explain them.

    Args:
        samples: ``Sample``s (or photos' ``PreparedSample``s), all of one kind.
        task: the model's task (``hookviz.tasks.Task``): its ``forward`` runs the model.
        module, device: the model, and where it runs.
        options, task_options: the run's ``TargetOptions`` and the task's own option group.
    """

    def __init__(self, samples: Sequence, task, module, device: str, options, task_options=None):
        self.samples = list(samples)
        self.task, self.module, self.device = task, module, device
        self.options, self.task_options = options, task_options

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def main(self) -> str:
        """The name of the input maps are made of."""
        return self.samples[0].main if self.samples else "image"

    def main_input(self):
        """The main input of every sample, (N, C, *spatial) on the model's device in its dtype:
        what methods that read or alter the input are handed."""
        from hookviz.modelstate import model_dtype

        return self.inputs().stacked(device=self.device, dtype=model_dtype(self.module))

    def inputs(self, rows=None, main=None, others=None) -> ModelInputs:
        """The model's inputs for ``rows`` (per row, the sample it stands for; default: each
        sample once), the main input replaced by ``main`` (one tensor per row) when given, and
        the inputs ``others`` names (per name, one tensor per row: integrated gradients' path
        through every input) by those. A ``main`` of fewer rows than ``rows`` (a layer's output
        later made into many rows) takes the other inputs of its own rows, the first ones."""
        owners = list(range(len(self.samples))) if rows is None else [int(r) for r in rows]
        if main is not None:
            owners = owners[: len(main)]
        found = {}
        for name in self.samples[0].tensors if self.samples else (self.main,):
            found[name] = [self.samples[r].tensors[name] for r in owners]
        if main is not None:
            found[self.main] = list(main)
        for name, replaced in (others or {}).items():
            found[name] = list(replaced)
        return ModelInputs(found, self.main, getattr(self.samples[0], "positional", None) if self.samples else None)

    def others(self, device=None, dtype=None) -> dict:
        """The inputs besides the main one of a sample of several (``positional`` says it is one), stacked by name; ``{}`` else."""
        if not self.samples or getattr(self.samples[0], "positional", None) is None:
            return {}
        inputs = self.inputs()
        return {name: inputs.stacked(name, device, dtype) for name in inputs.rows if name != self.main}

    def forward(self, rows=None, main=None, others=None):
        """The task's ``forward`` on ``inputs(rows, main, others)``, with the run's options and the task's own."""
        return self.task.forward(self.module, self.inputs(rows, main, others), self.device, self.options, self.task_options)
