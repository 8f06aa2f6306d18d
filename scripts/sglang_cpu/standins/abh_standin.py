"""Stand-ins for modules SGLang imports on a CPU but never needs to serve a model there (scripts/sglang_cpu/).

A stand-in module answers every attribute with a :class:`Missing` placeholder, so ``from sgl_kernel import
rmsnorm`` or ``T.InterpolationMode.BICUBIC`` at import time works; the moment SGLang *uses* one (calls it,
subclasses it, iterates it, tests it), :class:`StandInUsed` says which name, in which stand-in, and why the real
module is absent. Nothing here computes anything: a serving path that needs the real module fails loudly
instead of silently taking a fake.
"""

from __future__ import annotations

from typing import Any, NoReturn

WHY = {
    "sgl_kernel": "the PyPI sglang-kernel wheel holds CUDA objects only, and SGLang's CPU kernels (a source build) "
                  "need AVX-512 or AMX: on the CPU SGLang takes its torch-native paths (forward_native)",
    "torchvision": "the PyPI torchvision wheel does not load against torch 2.13.0+cpu; only SGLang's multimodal "
                   "processors use it, and a text model never reaches them",
}


class StandInUsed(RuntimeError):
    """SGLang used a stand-in: the serving path needs the real module, which this venv does not have."""


class Missing:
    """A name of a stand-in module: attribute access chains, any use raises :class:`StandInUsed`."""

    def __init__(self, path: str):
        object.__setattr__(self, "_path", path)

    def _fail(self, what: str) -> NoReturn:
        path = object.__getattribute__(self, "_path")
        top = path.split(".")[0]
        raise StandInUsed(f"{path} {what}: {top} is a stand-in in this venv (scripts/sglang_cpu/standins, "
                          f"installed by scripts/sglang_cpu/install.sh) because {WHY.get(top, 'it is absent')}; "
                          f"this serving path needs the real {top}")

    def __getattr__(self, name: str) -> Missing:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Missing(f"{object.__getattribute__(self, '_path')}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._fail("was called")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> NoReturn:
        self._fail("was subclassed")

    def __iter__(self) -> NoReturn:
        self._fail("was iterated")

    def __bool__(self) -> NoReturn:
        self._fail("was tested for truth")

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        self._fail(f"had .{name} set")

    def __repr__(self) -> str:
        return f"<stand-in {object.__getattribute__(self, '_path')}>"


def module_getattr(module: str) -> Any:
    """The ``__getattr__`` of a stand-in module (PEP 562): every public name is a :class:`Missing`."""

    def __getattr__(name: str) -> Missing:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return Missing(f"{module}.{name}")

    return __getattr__
