"""Precision helpers: build PrecisionSpec / PrecisionConfig messages and read
ExplainPrecision's plans and memory estimates.

    from ampd_client import precision
    precision.spec("bf16-mixed")                       # a built-in mode or a profile name
    precision.spec({"base": "16-mixed", "fp32Layers": ["head"]})   # a custom config
    for e in client.explain(spec):                     # one plan per mode
        print(precision.summary(e)["memory"]["total_bytes"])
    print(precision.table(client.explain({"mlp": {"inputDim": 784, "numClasses": 10}})))
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

from google.protobuf import json_format

from ._errors import SpecError
from ._proto import job_spec_pb2, precision_service_pb2
from ._specs import parse_message

#: Built-in mode names, in the server's order (its capabilities say which a
#: device accepts; the FP8 ones are for transformers). Aliases the server
#: also takes: "32", "fp32", "16", "bf16", and Lightning's
#: "transformer-engine" (fp8-hybrid).
BUILTIN_MODES = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "O0", "O1", "O2",
                 "O3", "fp8-hybrid", "fp8-current", "transformer-engine-float16")

_MEMORY_FIELDS = ("weights_bytes", "master_weights_bytes", "gradients_bytes",
                  "optimizer_state_bytes", "activation_bytes", "total_bytes")


def spec(value: Any) -> job_spec_pb2.PrecisionSpec:
    """A PrecisionSpec from a mode or profile name ("bf16-mixed"), a PrecisionConfig
    (message or dict: a custom config), a PrecisionSpec, or a dict in
    PrecisionSpec's own form ({"profile": ...} / {"custom": {...}})."""
    if isinstance(value, job_spec_pb2.PrecisionSpec):
        out = job_spec_pb2.PrecisionSpec()
        out.CopyFrom(value)
        return out
    out = job_spec_pb2.PrecisionSpec()
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        if not value:
            raise SpecError("a precision name must not be empty")
        out.profile = value[len("profiles/"):] if value.startswith("profiles/") else value
        return out
    if isinstance(value, dict) and set(value) & {"profile", "custom"}:
        return parse_message(value, job_spec_pb2.PrecisionSpec, "precision spec")
    out.custom.CopyFrom(config(value))
    return out


def config(value: Any) -> job_spec_pb2.PrecisionConfig:
    """A PrecisionConfig from a dict (JSON form, e.g. {"base": "16-mixed",
    "opPolicies": {"gelu": "CAST_POLICY_FP32"}}), a base mode name, or a message."""
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        return job_spec_pb2.PrecisionConfig(base=value)
    return parse_message(value, job_spec_pb2.PrecisionConfig, "precision config")


def dtype_name(dtype: int) -> str:
    """DTYPE_BF16 -> "bf16" ("" for unspecified)."""
    name = job_spec_pb2.DType.Name(dtype)
    return "" if dtype == 0 else name[len("DTYPE_"):].lower()


def policy_name(policy: int) -> str:
    """CAST_POLICY_LOWER_PRECISION -> "lower_precision"."""
    name = job_spec_pb2.CastPolicy.Name(policy)
    return "" if policy == 0 else name[len("CAST_POLICY_"):].lower()


def memory(explanation: precision_service_pb2.PrecisionExplanation) -> Dict[str, int]:
    """The memory estimate as {"weights_bytes": ..., ..., "total_bytes": ...}."""
    m = explanation.memory
    return {f: int(getattr(m, f)) for f in _MEMORY_FIELDS}


def ops(explanation: precision_service_pb2.PrecisionExplanation) -> List[Dict[str, Any]]:
    """The per-op plan with dtype names: [{"op", "layer", "inputs", "policy",
    "compute", "output"}, ...]."""
    return [{
        "op": o.op,
        "layer": o.layer,
        "inputs": [dtype_name(d) for d in o.input_dtypes],
        "policy": policy_name(o.policy),
        "compute": dtype_name(o.compute_dtype),
        "output": dtype_name(o.output_dtype),
    } for o in explanation.ops]


def summary(explanation: precision_service_pb2.PrecisionExplanation) -> Dict[str, Any]:
    """{"precision", "parameter_count", "memory", "ops"} as plain Python values."""
    return {
        "precision": explanation.precision,
        "parameter_count": int(explanation.parameter_count),
        "memory": memory(explanation),
        "ops": ops(explanation),
    }


def format_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1024
    return "%d B" % n  # pragma: no cover


def table(explanations: Iterable[precision_service_pb2.PrecisionExplanation]) -> str:
    """A text table of the memory estimates, one row per precision mode."""
    header = ("precision", "params", "weights", "master", "grads", "optimizer", "activations",
              "total")
    rows = [header]
    for e in explanations:
        m = memory(e)
        rows.append((e.precision, str(e.parameter_count)) +
                    tuple(format_bytes(m[f]) for f in _MEMORY_FIELDS))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def to_dict(message) -> Dict[str, Any]:
    """Any ampd message as a dict with proto field names and enum names."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
