"""The files a job leaves under --data_dir, read with the standard Python tools:
checkpoints and final weights with safetensors, metrics with TensorBoard's own
event reader."""
import glob
import os

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from conftest import AmpdServer

SPEC = {
    "model": {"mlp": {"hidden": [16]}},
    "data": {"synthetic": {"numExamples": 512, "featureDim": 8, "numClasses": 3,
                           "numTestExamples": 128, "seed": 7}},
    "precision": {"profile": "32-true"},
    "training": {"steps": 120, "batchSize": 32, "evalInterval": 40, "seed": 1},
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    from ampd_client import Client
    server = AmpdServer(str(tmp_path_factory.mktemp("files")), ["--checkpoint_every_steps=50"])
    try:
        with Client(server.address) as client:
            job = client.submit(SPEC).wait(timeout=120)
            assert job.succeeded, job
            yield os.path.join(server.workdir, "data"), job
    finally:
        server.stop()


def test_final_weights_load_with_safetensors(finished):
    data_dir, job = finished
    weights = load_file(os.path.join(data_dir, "jobs", job.id, "model.safetensors"))
    assert sorted(weights) == ["fc1.bias", "fc1.weight", "head.bias", "head.weight"]
    assert weights["fc1.weight"].shape == (16, 8)
    assert weights["fc1.weight"].dtype == np.float32
    assert weights["head.weight"].shape == (3, 16)
    assert np.isfinite(weights["fc1.weight"]).all()


def test_checkpoints_load_with_safetensors_and_carry_the_training_state(finished):
    data_dir, job = finished
    paths = sorted(glob.glob(os.path.join(data_dir, "checkpoints", job.id, "step-*.safetensors")))
    # Steps 50 and 100 (the last step writes final weights instead).
    assert [os.path.basename(p) for p in paths] == ["step-00000050.safetensors",
                                                   "step-00000100.safetensors"]
    with safe_open(paths[-1], framework="numpy") as f:
        meta = f.metadata()
        assert meta["format"] == "ampd-checkpoint-v1"
        assert meta["step"] == "100"
        keys = set(f.keys())
    assert "param/fc1.weight" in keys
    assert "exp_avg/fc1.weight" in keys and "exp_avg_sq/fc1.weight" in keys
    tensors = load_file(paths[-1])
    assert tensors["exp_avg_sq/head.bias"].min() >= 0  # second moments
    with open(paths[-1] + ".sha256") as f:
        import hashlib
        with open(paths[-1], "rb") as g:
            assert f.read().strip() == hashlib.sha256(g.read()).hexdigest()


def test_tensorboard_reads_the_metrics(finished):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    data_dir, job = finished
    acc = EventAccumulator(os.path.join(data_dir, "tensorboard", job.id))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ["train/loss", "train/lr", "train/loss_scale", "train/grad_norm",
                "train/skipped_steps", "train/samples_per_s", "eval/accuracy", "eval/loss"]:
        assert tag in tags, tags
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == list(range(1, 121))
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [40, 80, 120]
    assert acc.Scalars("eval/accuracy")[-1].value == pytest.approx(job.latest_eval.accuracy, abs=1e-6)
