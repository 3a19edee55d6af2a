"""A picture kind that kills the render worker about to draw it, as the OOM killer or
``kill -9`` would: for the images whose file stems ``HOOKVIZ_TEST_KILL`` names
(comma-separated; ``*``: every image). Only in a render worker: in any other process, and
for any other image, it draws nothing. ``HOOKVIZ_PLUGINS=tests.kill_plugin`` registers it;
tests/test_runner.py runs it through ``hookviz run --pictures summary,doom``."""

import os
import signal

from hookviz.render.kinds import PictureKind, register_kind


def build(explanation, layer):
    return None


def reuse_key(explanation, layer, options):
    from hookviz.render.worker import worker_cache

    doomed = os.environ.get("HOOKVIZ_TEST_KILL", "").split(",")
    path = explanation.image.source.path
    if worker_cache() is not None and ("*" in doomed or (path is not None and path.stem in doomed)):
        os.kill(os.getpid(), signal.SIGKILL)
    return None


KIND = register_kind(
    PictureKind("doom", group="doom", label="doom", help="kills its render worker (a test)", build=build, reuse_key=reuse_key)
)
