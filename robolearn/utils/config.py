"""Plain mappings to validated dataclasses: the one place configuration values are checked by type.

:func:`to_dataclass` rejects an unknown key by naming it, the dataclass, its valid fields and the
closest match, checks each value against the field's annotation (no booleans as integers, no
fractional counts) and lets ``__post_init__`` check ranges. The CLI uses it on Hydra's composed
config; :func:`robolearn.load_policy` on a run's saved ``config.json``. No Hydra in here.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or key that cannot work; the message names the field and the choices."""


def to_dataclass(cls: type[T], mapping: Mapping[str, Any], path: str = "") -> T:
    """Build dataclass ``cls`` from ``mapping``, checking every key and value.

    Args:
        cls: the dataclass.
        mapping: field values; missing fields keep their defaults.
        path: dotted location of ``mapping`` in the whole config, for messages (``algo``).

    Raises:
        ConfigError: an unknown key (named, with the valid fields and the closest match), a value
            of the wrong type, a missing required field, or a value ``__post_init__`` rejects.
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping of {cls.__name__} fields, got {mapping!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in mapping.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{where}: field {key!r} is not in {cls.__name__}{hint}; valid fields: {', '.join(fields)}"
            )
        kwargs[key] = _convert(hints[key], value, where)
    missing = [
        n for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{path or cls.__name__}: missing required field(s) {', '.join(missing)} of {cls.__name__}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def _convert(annotation: Any, value: Any, where: str) -> Any:
    """``value`` checked against ``annotation``; lists become tuples where a tuple is expected."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(annotation):
            try:
                return _convert(option, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_name(annotation)}, got {value!r}")
    if annotation is type(None):
        if value is None:
            return None
    elif annotation is Any:
        return value
    elif annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            args = typing.get_args(annotation)
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
            if len(args) == len(value):
                return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    elif origin is dict or annotation is dict:
        if isinstance(value, Mapping):
            return dict(value)
    elif dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):  # type: ignore[arg-type]
            return value
        if isinstance(value, Mapping):
            return to_dataclass(annotation, value, where)  # type: ignore[arg-type]
    else:
        return value  # an annotation this checker does not know: the dataclass validates
    raise ConfigError(f"{where}: expected {_name(annotation)}, got {value!r}")


def _name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def read_json_object(path: str | os.PathLike[str], missing_hint: str = "") -> dict[str, Any]:
    """The JSON object stored at ``path``.

    Raises:
        FileNotFoundError: ``path`` does not exist (the message adds ``missing_hint``).
        ConfigError: it cannot be read, is not JSON, or is JSON but not an object (the file is named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist{': ' + missing_hint if missing_hint else ''}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def lists(value: Any) -> Any:
    """Tuples as lists, recursively (JSON and OmegaConf both speak lists)."""
    if isinstance(value, Mapping):
        return {k: lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [lists(v) for v in value]
    return value


__all__ = ["ConfigError", "flatten_overrides", "lists", "read_json_object", "to_dataclass"]


def flatten_overrides(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested task overrides as ``robolearn.make`` keywords: ``{"a": {"b": 1}}`` -> ``{"a__b": 1}``
    (an empty mapping is a value: ``{}``), as ``robolearn train`` passes a recipe's ``task_overrides``.
    """
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        name = f"{prefix}__{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_overrides(value, name))
        else:
            flat[name] = value
    return flat
