"""import_torchvision(): torchvision without torch._dynamo, and nothing else different.

Each test runs in a fresh interpreter: what is imported is process-wide state.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from .conftest import python_output

pytestmark = pytest.mark.slow  # every test here starts a fresh interpreter


def test_torchvision_works_and_dynamo_stays_unimported_until_asked_for():
    code = textwrap.dedent(
        """
        import sys
        import torch
        from hookviz.lazy_dynamo import enable, import_torchvision
        enable()

        torchvision = import_torchvision()
        print("after import:", "torch._dynamo" in sys.modules)

        model = torchvision.models.get_model("resnet18", weights=None).eval()
        x = torch.randn(2, 3, 64, 64, requires_grad=True)
        model(x).sum().backward()
        print("after forward and backward:", "torch._dynamo" in sys.modules)

        # roi_align is the function whose import pulled dynamo in: it still works, and its
        # is_compile_supported, called lazily, answers what the real one answers.
        from torchvision.ops import roi_align
        boxes = torch.tensor([[0, 0.0, 0.0, 3.0, 3.0]])
        pooled = roi_align(torch.full((1, 2, 8, 8), 5.0), boxes, output_size=2)
        print("roi_align:", pooled.shape == (1, 2, 2, 2) and bool((pooled == 5.0).all()))
        shim = sys.modules["torchvision.ops.roi_align"].is_compile_supported
        answer = shim("cpu")
        from torch._dynamo.utils import is_compile_supported
        print("shim agrees:", answer == is_compile_supported("cpu"))
        print("real dynamo:", type(sys.modules["torch._dynamo"]).__name__ == "module",
              hasattr(torch._dynamo, "optimize"))
        """
    )
    assert python_output(code).splitlines() == [
        "after import: False",
        "after forward and backward: False",
        "roi_align: True",
        "shim agrees: True",
        "real dynamo: True True",
    ]


def test_anything_else_asked_of_dynamo_during_the_import_loads_the_real_one(tmp_path):
    """A torchvision that used more of dynamo at import time gets the real thing, only sooner."""
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import torch._dynamo\nfrom torch._dynamo.utils import is_compile_supported\nCONFIG = torch._dynamo.config\n"
    )
    code = textwrap.dedent(
        """
        import sys
        from hookviz.lazy_dynamo import enable, import_torchvision
        enable()

        torchvision = import_torchvision()
        import torch._dynamo.config
        print(torchvision.CONFIG is torch._dynamo.config, type(sys.modules["torch._dynamo"]).__name__)
        print(torchvision.is_compile_supported("cpu") == torch._dynamo.utils.is_compile_supported("cpu"))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    assert python_output(code, env).splitlines() == ["True module", "True"]


def test_plain_import_when_dynamo_or_torchvision_is_already_loaded():
    code = textwrap.dedent(
        """
        import sys
        import torch._dynamo
        real = sys.modules["torch._dynamo"]
        from hookviz.lazy_dynamo import enable, import_torchvision
        enable()

        torchvision = import_torchvision()
        from torchvision.ops import roi_align
        print(sys.modules["torch._dynamo"] is real,
              sys.modules["torchvision.ops.roi_align"].is_compile_supported is real.utils.is_compile_supported)
        """
    )
    assert python_output(code).split() == ["True", "True"]


def test_a_run_never_imports_dynamo(tmp_path, photo):
    """The point of it all: `hookviz run` on a torchvision model leaves dynamo out (1 s of start-up)."""
    code = textwrap.dedent(
        f"""
        import sys
        from hookviz.cli import main
        sys.argv = ["hookviz", "run", {str(photo)!r}, "--model", "resnet18", "--weights", "none",
                    "--out", {str(tmp_path / "out")!r}, "--pictures", "none", "-q"]
        try:
            main()
        except SystemExit as exit:
            print("exit", exit.code)
        print("torch._dynamo" in sys.modules)
        """
    )
    assert python_output(code).split() == ["exit", "0", "False"]


def test_the_library_imports_torchvision_plainly():
    """The stand-ins are a speed trick of the command's own process: a notebook or script
    that uses the library gets the ordinary import, dynamo included."""
    code = textwrap.dedent(
        """
        import sys
        import hookviz
        hookviz.load_model("resnet18", "none")
        from hookviz import lazy_dynamo
        print(lazy_dynamo._enabled, type(sys.modules["torch._dynamo"]).__name__)
        """
    )
    assert python_output(code).split() == ["False", "module"]


def test_any_failure_of_the_stand_ins_falls_back_to_the_plain_import():
    code = textwrap.dedent(
        """
        import sys
        from hookviz import lazy_dynamo

        def broken():
            import torchvision.models  # a partial import, then a failure
            raise RuntimeError("unexpected")

        lazy_dynamo.enable()
        lazy_dynamo._import_with_stand_ins = broken
        torchvision = lazy_dynamo.import_torchvision()
        model = torchvision.models.resnet18(weights=None)
        print(type(sys.modules["torch._dynamo"]).__name__, "_StandIn" not in repr(sys.modules.get("torch._dynamo.utils")))
        """
    )
    assert python_output(code).split() == ["module", "True"]
