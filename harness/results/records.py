"""Typed result records: frozen dataclasses built once, serialised by one function and read back by one.

A :class:`Record` (or any frozen dataclass, as the statistics' results) has fields that are JSON values, other
records, lists / string-keyed dicts of them, or ``TypedDict`` JSON objects. :func:`to_doc` makes the stored
JSON object (fields in declaration order, an :func:`omit_none` field left out while None); :func:`from_doc`
reads one back, every field checked against its type, so a hand-edited file is refused with the field's path
(``arms.a.accuracy: expected a number, found "x"``). Undeclared keys are ignored on reading.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, Union

#: A JSON value as stored: what :func:`to_doc` returns and :func:`from_doc` takes.
JSON = Union[None, bool, int, float, str, Sequence["JSON"], Mapping[str, "JSON"]]  # noqa: UP007 - a recursive alias
JSONObject = dict[str, JSON]

R = TypeVar("R")


class RecordError(ValueError):
    """A stored document does not have the shape of its record; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of every stored result record (see the module docstring)."""

    def to_doc(self) -> JSONObject:
        return to_doc(self)

    @classmethod
    def from_doc(cls: type[R], doc: Any, where: str = "") -> R:
        return from_doc(cls, doc, where)


def omit_none(default: Any = None) -> Any:
    """A field left out of the stored document while it is None (an optional block)."""
    return dataclasses.field(default=default, metadata={"omit_none": True})


def to_doc(value: Any) -> Any:
    """The JSON form of a record (or of a value inside one)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: JSONObject = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = to_doc(v)
        return out
    if isinstance(value, list | tuple):
        return [to_doc(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_doc(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a record class (cached: resolving them parses annotations)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _describe(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:39] + "…"


#: The scalar types a field may have: what a stored value of each must be, and how a refusal says it.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
    type(None): (lambda v: v is None, "null"),
}


def _convert(tp: Any, v: Any, where: str) -> Any:
    """``v`` read as type ``tp`` (RecordError naming ``where`` when it is not one)."""
    if tp is Any or tp is object:
        return v
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if v is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, v, where)
            except RecordError as e:
                errors.append(str(e))
        raise RecordError(errors[0] if len(errors) == 1 else f"{where}: unexpected {_describe(v)}")
    if origin is typing.Literal:
        if v in typing.get_args(tp):
            return v
        raise RecordError(f"{where}: expected one of {typing.get_args(tp)}, found {_describe(v)}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_doc(tp, v, where)
    if typing.is_typeddict(tp):
        return _typed_dict(tp, v, where)
    if origin in (list, tuple):
        if not isinstance(v, list | tuple):
            raise RecordError(f"{where}: expected a list, found {_describe(v)}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(v):
                raise RecordError(f"{where}: expected {len(args)} values, found {len(v)}")
            return tuple(_convert(a, x, f"{where}[{i}]") for i, (a, x) in enumerate(zip(args, v, strict=True)))
        item = args[0] if args else Any
        out = [_convert(item, x, f"{where}[{i}]") for i, x in enumerate(v)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(v, dict):
            raise RecordError(f"{where}: expected an object, found {_describe(v)}")
        _, val = typing.get_args(tp) or (str, Any)
        return {str(k): _convert(val, x, f"{where}.{k}") for k, x in v.items()}
    if tp in _SCALARS:
        ok, says = _SCALARS[tp]
        if ok(v):
            return float(v) if tp is float else v
        raise RecordError(f"{where}: expected {says}, found {_describe(v)}")
    return v  # a JSON alias or another type the record does not check further


@functools.cache
def _required_keys(tp: Any) -> frozenset[str]:
    """The keys the TypedDict ``tp`` requires (Python 3.11's ``__required_keys__`` misses a ``NotRequired``
    under ``from __future__ import annotations``)."""
    origins = {k: typing.get_origin(v) for k, v in typing.get_type_hints(tp, include_extras=True).items()}
    return frozenset(k for k, o in origins.items() if o is typing.Required
                     or (o is not typing.NotRequired and k in tp.__required_keys__))


def _typed_dict(tp: Any, v: Any, where: str) -> JSONObject:
    """A JSON object read as the TypedDict ``tp``: its declared keys checked, the others kept as stored."""
    if not isinstance(v, dict):
        raise RecordError(f"{where}: expected an object, found {_describe(v)}")
    hints = _hints(tp)
    required = _required_keys(tp)
    for key in hints:
        if key in required and key not in v:
            raise RecordError(f"{where}.{key}: missing")
    return {str(k): _convert(hints[k], x, f"{where}.{k}") if k in hints else x for k, x in v.items()}


def from_doc(cls: type[R], doc: Any, where: str = "") -> R:
    """The record ``cls`` read from its stored JSON object, every field checked (see the module docstring)."""
    if not isinstance(doc, Mapping):
        raise RecordError(f"{where or cls.__name__}: expected an object, found {_describe(doc)}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # any dataclass (checked by _convert's caller)
        path = f"{where}.{f.name}" if where else f.name
        if f.name in doc:
            kwargs[f.name] = _convert(hints[f.name], doc[f.name], path)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"{path}: missing")
    return cls(**kwargs)


def finite_or_none(x: float | None) -> float | None:
    """``x`` when it is a finite number, else None (JSON has no inf or nan)."""
    return None if x is None or not math.isfinite(x) else float(x)
