"""Job specs from dicts, JSON text, JSON files or messages."""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Tuple, Type

from google.protobuf import json_format, message as _message

from ._errors import SpecError
from ._proto import job_spec_pb2


def _load(value: Any, what: str) -> Tuple[Any, str]:
    """(parsed JSON, where it came from) for a dict, a JSON string or a file path."""
    if isinstance(value, Mapping):
        return value, "%s dict" % what
    if isinstance(value, (str, bytes, os.PathLike)):
        text = os.fsdecode(value) if not isinstance(value, str) else value
        if text.lstrip().startswith("{"):
            source = "%s JSON" % what
        else:
            source = text
            try:
                with open(text, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise SpecError("cannot read %s file %s: %s" % (what, source, e.strerror)) from e
        try:
            return json.loads(text), source
        except ValueError as e:
            raise SpecError("%s: not valid JSON: %s" % (source, e)) from e
    raise SpecError("a %s must be a dict, a JSON string, a file path or a message; got %s"
                    % (what, type(value).__name__))


def parse_message(value: Any, cls: Type[_message.Message], what: str) -> _message.Message:
    if isinstance(value, cls):
        out = cls()
        out.CopyFrom(value)
        return out
    if isinstance(value, _message.Message):
        raise SpecError("expected a %s, got a %s" % (cls.DESCRIPTOR.full_name,
                                                     value.DESCRIPTOR.full_name))
    data, source = _load(value, what)
    try:
        return json_format.ParseDict(data, cls())
    except json_format.ParseError as e:
        raise SpecError("%s: %s" % (source, e)) from e


_OPTIMIZER_ALIASES = {
    "adamw": {"adamw": {}},
    "adamw8bit": {"adamw": {"stateBits": 8}},  # bitsandbytes' name
    "sgd": {"sgd": {}},
    "sgd8bit": {"sgd": {"stateBits": 8}},
}


def _expand_aliases(data: Any, source: str) -> Any:
    """"optimizer": "adamw8bit" -> {"adamw": {"stateBits": 8}}, as ampd's own
    spec reader (engine/runner/spec_json.h) does."""
    if not isinstance(data, Mapping) or not isinstance(data.get("optimizer"), str):
        return data
    name = data["optimizer"]
    if name.lower() not in _OPTIMIZER_ALIASES:
        raise SpecError('%s: optimizer: unknown name "%s" (known: %s, or an object)'
                        % (source, name, ", ".join(sorted(_OPTIMIZER_ALIASES))))
    out = dict(data)
    out["optimizer"] = json.loads(json.dumps(_OPTIMIZER_ALIASES[name.lower()]))
    return out


def job_spec(spec: Any) -> job_spec_pb2.JobSpec:
    """A JobSpec from a dict (protobuf's JSON form, as in examples/*.json), JSON
    text, the path of a JSON file, or a JobSpec. "optimizer": "adamw8bit" (and
    "adamw", "sgd", "sgd8bit") are accepted for the spelled-out optimizer."""
    if isinstance(spec, _message.Message):
        return parse_message(spec, job_spec_pb2.JobSpec, "job spec")
    data, source = _load(spec, "job spec")
    try:
        return json_format.ParseDict(_expand_aliases(data, source), job_spec_pb2.JobSpec())
    except json_format.ParseError as e:
        raise SpecError("%s: %s" % (source, e)) from e


def model_spec(model: Any) -> job_spec_pb2.ModelSpec:
    """A ModelSpec from a dict ({"mlp": {...}}), JSON text or a ModelSpec."""
    return parse_message(model, job_spec_pb2.ModelSpec, "model spec")


def is_model_spec(value: Any) -> bool:
    """True for a ModelSpec or a dict in its form ({"mlp": ...})."""
    if isinstance(value, job_spec_pb2.ModelSpec):
        return True
    return isinstance(value, Mapping) and set(value) <= {"mlp"} and bool(value)
