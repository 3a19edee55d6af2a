"""How far to trust a map: measures computed from a model, its inputs and their maps.

* ``deletion_insertion``: RISE's deletion and insertion curves (Petsiuk et al. 2018), as
  torch-cam's ``DeletionInsertionMetric`` computes them.
* ``road``: ROAD (Rong et al. 2022), the most- and least-relevant-first curves with noisy
  linear imputation, as pytorch-grad-cam's ``ROADCombined`` computes them.
* ``cascading_randomisation``: the model-parameter randomisation check of Adebayo et al.
  2018, "Sanity Checks for Saliency Maps".

Each is a pure computation: it takes a scoring callable (or the model and a callable that
explains with it), an input batch and its maps, and returns one frozen record per image with
``to_json``. None of them changes the caller's model, its mode or the process's random state.
"""

from hookviz.trust.deletion import DeletionInsertion, deletion_insertion
from hookviz.trust.maps import at_input_size
from hookviz.trust.road import ROAD_PERCENTILES, Road, road
from hookviz.trust.sanity import SANITY_THRESHOLD, Randomisation, cascading_randomisation, parametrised_modules, spearman

__all__ = [
    "ROAD_PERCENTILES",
    "SANITY_THRESHOLD",
    "DeletionInsertion",
    "Randomisation",
    "Road",
    "at_input_size",
    "cascading_randomisation",
    "deletion_insertion",
    "parametrised_modules",
    "road",
    "spearman",
]
