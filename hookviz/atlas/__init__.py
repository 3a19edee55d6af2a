"""The atlas of a layer (``hookviz atlas``): what each channel responds to across a dataset.

One streaming pass of forward passes keeps, per channel, its top-K examples (``topk``, ranked
by a ``ranking``) and its statistics (``statistics``, ``sketch``), in O(channels x K) memory;
a short second pass cuts each example's receptive field (``fields``, ``crops``); then
atlas.json, atlas.npz (``records``) and the pages (``pages``). ``building`` runs the steps,
``state`` makes them resumable and the shards mergeable.
"""

from hookviz.atlas.building import AtlasResult, make_atlas, merge_atlas
from hookviz.atlas.request import AtlasRequest, parse_shard

__all__ = ["AtlasRequest", "AtlasResult", "make_atlas", "merge_atlas", "parse_shard"]
