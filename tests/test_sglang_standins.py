"""The stand-ins of the SGLang CPU venv (scripts/sglang_cpu/standins): importable names that fail loudly, naming
themselves, the moment SGLang uses one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

STANDINS = Path(__file__).resolve().parents[1] / "scripts" / "sglang_cpu" / "standins"


def _ours() -> list[str]:
    return [m for m in sys.modules if m.split(".")[0] in ("abh_standin", "sgl_kernel", "torchvision")]


@pytest.fixture()
def standins(monkeypatch):
    """The stand-ins importable for one test, and gone from ``sys.modules`` after it."""
    monkeypatch.syspath_prepend(str(STANDINS))
    for name in _ours():
        monkeypatch.delitem(sys.modules, name)
    import abh_standin

    yield abh_standin
    for name in _ours():
        del sys.modules[name]


def test_imports_work_and_every_use_raises_naming_the_name(standins):
    import sgl_kernel
    import torchvision.transforms as T  # noqa: N812 - SGLang's own spelling
    from sgl_kernel import rmsnorm
    from torchvision.transforms.v2 import functional as tvf

    mode = T.InterpolationMode.BICUBIC  # module-level attribute chains, as in SGLang's processors, import fine
    with pytest.raises(standins.StandInUsed, match=r"sgl_kernel\.rmsnorm was called: sgl_kernel is a stand-in"):
        rmsnorm(1, 2)
    with pytest.raises(standins.StandInUsed, match=r"torchvision\.transforms\.InterpolationMode\.BICUBIC was "
                                                    r"tested for truth.*torchvision is a stand-in"):
        bool(mode)
    with pytest.raises(standins.StandInUsed, match=r"torchvision\.transforms\.Compose was subclassed"):
        class Pipeline(T.Compose):  # type: ignore[misc,name-defined]
            pass
    with pytest.raises(standins.StandInUsed, match=r"torchvision\.transforms\.v2\.functional\.resize was called"):
        tvf.resize([])
    with pytest.raises(standins.StandInUsed, match="iterated"):
        list(sgl_kernel.kvcacheio)
    with pytest.raises(standins.StandInUsed, match="set"):
        sgl_kernel.rmsnorm.x = 1
    assert "stand-in sgl_kernel.rmsnorm" in repr(sgl_kernel.rmsnorm)


def test_dunder_lookups_stay_attribute_errors(standins):
    """hasattr(module, '__path__')-style probes (importlib, pickle, inspect) see ordinary modules."""
    import sgl_kernel

    assert not hasattr(sgl_kernel, "__wrapped__") and not hasattr(sgl_kernel.rmsnorm, "__wrapped__")
    with pytest.raises(AttributeError):
        sgl_kernel.__missing_dunder__  # noqa: B018


def test_torchvision_has_a_version_transformers_reads_as_too_old(standins):
    import torchvision
    from packaging.version import Version

    assert Version(torchvision.__version__) < Version("0.1")
