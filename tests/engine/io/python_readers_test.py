"""The files ampd writes, read by the reference Python readers.

write_samples (a C++ binary; its path comes in $WRITE_SAMPLES) writes a
safetensors checkpoint and a TensorBoard event file; the safetensors package
(Hugging Face's own parser) and TensorBoard's EventAccumulator must read them
back with the exact dtypes, shapes, values, tags and steps.
"""

import json
import math
import os
import struct
import subprocess

import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file
from tensorboard.backend.event_processing import event_accumulator

F32 = np.array([[0.5, -1.25, 3.0], [0.0, -0.0, 1024.5]], dtype=np.float32)
F16 = np.array([1.0, -2.5, 0.125, 65504.0], dtype=np.float16)
BF16 = np.array([[1.0, -3.140625], [0.5, 256.0], [-0.0078125, 3.0e38]], dtype=np.float32).astype(
    ml_dtypes.bfloat16
)
F64 = np.array([3.141592653589793, -1e300], dtype=np.float64)
SCALAR = np.array(7.0, dtype=np.float32)
METADATA = {"format": "pt", "producer": "ampd write_samples"}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    out = tmp_path_factory.mktemp("samples")
    subprocess.run([os.environ["WRITE_SAMPLES"], str(out)], check=True)
    return out


def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return n, json.loads(f.read(n))


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), (a, b)


def test_header_is_plain_json_with_hugging_face_dtype_names(samples):
    n, header = _header(samples / "sample.safetensors")
    assert (8 + n) % 8 == 0
    assert header["__metadata__"] == METADATA
    assert {k: v["dtype"] for k, v in header.items() if k != "__metadata__"} == {
        "fc1.weight": "F32",
        "fc1.bias": "F16",
        "head.weight": "BF16",
        "norm.scale": "F64",
        "step": "F32",
    }
    assert header["head.weight"]["shape"] == [3, 2]
    assert header["step"]["shape"] == []


def test_numpy_load_file(samples):
    tensors = load_file(str(samples / "sample_numpy.safetensors"))
    assert sorted(tensors) == ["fc1.bias", "fc1.weight", "norm.scale", "step"]
    _same_bits(tensors["fc1.weight"], F32)
    _same_bits(tensors["fc1.bias"], F16)
    _same_bits(tensors["norm.scale"], F64)
    _same_bits(tensors["step"], SCALAR)


def test_safe_open_reads_metadata_and_tensors(samples):
    with safe_open(str(samples / "sample.safetensors"), framework="numpy") as f:
        assert f.metadata() == METADATA
        assert sorted(f.keys()) == ["fc1.bias", "fc1.weight", "head.weight", "norm.scale", "step"]
        _same_bits(f.get_tensor("fc1.weight"), F32)
        _same_bits(f.get_tensor("fc1.bias"), F16)
        _same_bits(f.get_tensor("norm.scale"), F64)


def test_bf16_through_the_reference_parser(samples):
    # numpy has no bfloat16, so take the raw bytes from safetensors' own
    # (validating) parser and view them as ml_dtypes.bfloat16.
    data = (samples / "sample.safetensors").read_bytes()
    tensors = dict(safetensors.deserialize(data))
    bf16 = tensors["head.weight"]
    assert bf16["dtype"].upper() in ("BF16", "BFLOAT16")
    assert list(bf16["shape"]) == [3, 2]
    got = np.frombuffer(bytes(bf16["data"]), dtype=ml_dtypes.bfloat16).reshape(3, 2)
    _same_bits(got, BF16)
    assert float(got[2, 1]) == float(BF16[2, 1]) and not math.isinf(float(got[2, 1]))
    assert bytes(tensors["fc1.weight"]["data"]) == F32.tobytes()


def test_tensorboard_reads_the_scalars(samples):
    tb_dir = samples / "tb"
    files = os.listdir(tb_dir)
    assert len(files) == 1 and files[0].startswith("events.out.tfevents."), files
    acc = event_accumulator.EventAccumulator(str(tb_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    assert acc.file_version == 2.0
    assert sorted(acc.Tags()["scalars"]) == sorted(
        [
            "eval/accuracy",
            "train/grad_norm",
            "train/loss",
            "train/loss_scale",
            "train/lr",
            "train/samples_per_sec",
            "train/skipped_steps",
        ]
    )

    def series(tag):
        return [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]

    f32 = lambda x: float(np.float32(x))
    assert series("train/loss") == [(s, 4.0 / 2**s, 1700000000.0 + s) for s in (1, 2, 3)]
    assert series("train/lr") == [(s, f32(0.001 * s), 1700000000.0 + s) for s in (1, 2, 3)]
    assert [v for _, v, _ in series("train/loss_scale")] == [65536.0] * 3
    assert [v for _, v, _ in series("train/grad_norm")] == [0.25, 0.5, 0.75]
    # Zeros are kept (the value is written even when it is 0.0).
    assert series("train/skipped_steps") == [(s, 0.0, 1700000000.0 + s) for s in (1, 2, 3)]
    assert [v for _, v, _ in series("train/samples_per_sec")] == [1001.0, 1002.0, 1003.0]
    assert series("eval/accuracy") == [(3, 0.875, 1700000003.5)]
