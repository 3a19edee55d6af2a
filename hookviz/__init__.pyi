# The public API as type checkers and IDEs see it; at run time hookviz/__init__.py loads
# each name lazily, on first use, so that `import hookviz` does not import torch.
from .anatomy.layers import list_layers as list_layers
from .compare.diffing import diff_runs as diff_runs
from .compare.measures import RunDiff as RunDiff
from .errors import HookvizError as HookvizError, UsageError as UsageError
from .explaining.explainer import Explainer as Explainer
from .explaining.notebook import explain as explain
from .explaining.passes import Explanation as Explanation, LayerResult as LayerResult
from .explaining.recording import Capture as Capture, Recording as Recording, record as record
from .inputs.images import Preprocessing as Preprocessing
from .models.loading import LoadedModel as LoadedModel, list_models as list_models, load_model as load_model
from .options import (
    CheckOptions as CheckOptions,
    InputOptions as InputOptions,
    LayerOptions as LayerOptions,
    ModelOptions as ModelOptions,
    PictureOptions as PictureOptions,
    RunOptions as RunOptions,
    TargetOptions as TargetOptions,
    Tolerances as Tolerances,
    TrustOptions as TrustOptions,
)
from .runs.explorer_embed import show_run as show_run
from .runs.runner import run as run
from .tasks import DetectOptions as DetectOptions, EmbedOptions as EmbedOptions

__version__: str
__all__: list[str]
