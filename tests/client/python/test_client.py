"""The Python client (client/python, installed as ampd-client) against a real ampd."""
import importlib.util
import math
import os
import socket
import threading
import uuid

import grpc
import pytest

import ampd_client
from ampd_client import (AmpdError, Client, FailedPreconditionError, InvalidArgumentError,
                         JobFailedError, NotFoundError, SpecError, precision, v1)

# tests/client/python -> the repository (or the runfiles tree under Bazel).
REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def tiny_job(steps, profile="32-true", seed=0, **training):
    """A small synthetic job that trains in well under a second (as the server
    tests' TinyJobJson)."""
    spec = {
        "model": {"mlp": {"hidden": [16]}},
        "data": {"synthetic": {"numExamples": 512, "featureDim": 8, "numClasses": 3,
                               "numTestExamples": 128, "seed": 7}},
        "precision": {"profile": profile},
        "training": {"steps": steps, "batchSize": 32, "evalInterval": 10, "seed": seed},
    }
    spec["training"].update(training)
    return spec


def slow_job(steps):
    """Wider layers and batches: a few milliseconds a step, so a stream can be
    cut while the job is still running."""
    spec = tiny_job(steps)
    spec["model"]["mlp"]["hidden"] = [512, 512]
    spec["data"]["synthetic"].update(featureDim=256, numExamples=4096)
    spec["training"].update(batchSize=256, evalInterval=50)
    return spec


def kinds_and_steps(events):
    return [(e.kind, e.step) for e in events]


def raw(events):
    return [e.raw.SerializeToString(deterministic=True) for e in events]


# -- the installed package ----------------------------------------------------


def test_installed_package_is_built_from_these_sources():
    # The tests import the installed ampd-client (tools/setup installs it); it
    # must be the one built from this tree's client/python and proto/.
    assert not os.path.abspath(ampd_client.__file__).startswith(os.path.join(REPO, "client")), \
        "ampd_client was imported from the source tree, not the installed package"
    spec = importlib.util.spec_from_file_location(
        "ampd_build", os.path.join(REPO, "client", "python", "ampd_build.py"))
    ampd_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ampd_build)
    expected = ampd_build.source_hash(os.path.join(REPO, "client", "python"),
                                      os.path.join(REPO, "proto"))
    from ampd_client import _build_info
    assert _build_info.SOURCE_HASH == expected, (
        "the installed ampd-client was built from other sources: run tools/setup "
        "(or pip install ./client/python)")


def test_generated_stubs_are_importable():
    assert v1.JobSpec.DESCRIPTOR.full_name == "ampd.v1.JobSpec"
    assert v1.SUCCEEDED == v1.JobState.Value("SUCCEEDED")
    assert hasattr(v1.TrainingServiceStub, "__init__")
    assert hasattr(v1.PrecisionServiceStub, "__init__")


# -- jobs ---------------------------------------------------------------------


def test_metrics_yields_every_step_once_and_ends_succeeded(client):
    job = client.submit(tiny_job(25))
    assert job.id and job.name == "jobs/" + job.id
    assert job.state in ("QUEUED", "RUNNING")
    events = list(job.metrics())
    steps = [e.step for e in events if e.kind == "step"]
    assert steps == list(range(1, 26))
    assert [e.step for e in events if e.kind == "eval"] == [10, 20, 25]  # and at the end
    states = [e.state for e in events if e.kind == "state"]
    assert states == ["QUEUED", "RUNNING", "SUCCEEDED"]
    assert events[-1].kind == "state" and events[-1].state == "SUCCEEDED"
    assert not any(e.kind == "heartbeat" for e in events)
    first = next(e for e in events if e.kind == "step")
    assert first.loss > 0 and first.total_steps == 25 and first.record.step == 1
    d = first.to_dict()
    assert d["kind"] == "step" and d["step"] == 1 and d["total_steps"] == 25
    assert events[-1].to_dict()["state"] == "SUCCEEDED"


def test_wait_returns_the_succeeded_job_with_accuracy(client):
    job = client.submit(tiny_job(30))
    done = job.wait(timeout=120)
    assert done is job
    assert job.state == "SUCCEEDED" and job.succeeded and job.done
    assert job.step == job.total_steps == 30
    assert job.accuracy is not None and 0.0 <= job.accuracy <= 1.0
    assert job.latest_eval.step == 30
    assert job.precision == "32-true"
    assert client.get(job.id).state == "SUCCEEDED"
    assert client.get(job.name).id == job.id
    # Waiting on an ended job returns at once.
    assert job.wait(timeout=5).succeeded


def test_metrics_since_step_skips_what_was_seen(client):
    job = client.submit(tiny_job(20)).wait(timeout=120)
    events = list(job.metrics(since_step=12))
    assert [e.step for e in events if e.kind == "step"] == list(range(13, 21))
    assert all(e.step > 12 for e in events)
    assert events[-1].state == "SUCCEEDED"
    # Past the end: only the terminal state, so a watcher still learns how it ended.
    tail = list(job.metrics(since_step=1000))
    assert [e.state for e in tail] == ["SUCCEEDED"]


def test_bad_spec_raises_ampd_error_with_field_violations(client):
    with pytest.raises(AmpdError) as info:
        client.submit(tiny_job(10, batchSize=0))
    err = info.value
    assert isinstance(err, InvalidArgumentError)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.code_name == "INVALID_ARGUMENT"
    assert "spec.training.batch_size" in err.fields
    assert "must be > 0" in err.violation("spec.training.batch_size")
    assert err.method == "CreateJob"
    assert "spec.training.batch_size" in str(err)


def test_unknown_profile_is_a_field_violation(client):
    with pytest.raises(InvalidArgumentError) as info:
        client.submit(tiny_job(10, profile="no-such-profile"))
    assert "spec.precision.profile" in info.value.fields


def test_specs_that_cannot_be_parsed_fail_before_any_call(client, tmp_path):
    with pytest.raises(SpecError, match="no_such_field"):
        client.submit({"no_such_field": 1})
    with pytest.raises(SpecError, match="cannot read"):
        client.submit(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        client.submit(str(bad))
    with pytest.raises(SpecError):
        client.submit(v1.ModelSpec())


def test_submit_accepts_json_text_and_messages(client, tmp_path):
    import json
    spec = tiny_job(5)
    from_text = client.submit(json.dumps(spec))
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    from_path = client.submit(path)  # a PathLike
    from_message = client.submit(ampd_client.job_spec(spec))
    for job in (from_text, from_path, from_message):
        assert job.spec == ampd_client.job_spec(spec)
        assert job.wait(timeout=120).succeeded


def test_request_id_makes_submit_idempotent(client):
    request_id = "py-test-" + uuid.uuid4().hex
    first = client.submit(tiny_job(5, seed=1), request_id=request_id)
    again = client.submit(tiny_job(5, seed=1), request_id=request_id)
    assert again.id == first.id
    with pytest.raises(InvalidArgumentError) as info:
        client.submit(tiny_job(5, seed=2), request_id=request_id)
    assert "request_id" in info.value.fields
    # Without one, every submission is its own job.
    assert client.submit(tiny_job(5)).id != client.submit(tiny_job(5)).id


def test_cancel_a_long_job(client):
    job = client.submit(tiny_job(10_000_000))
    stream = job.metrics()
    for event in stream:  # until it is training
        if event.kind == "step":
            break
    stream.close()
    assert job.refresh().state == "RUNNING"
    assert job.cancel().state in ("CANCELLING", "CANCELLED")
    job.wait(timeout=60)
    assert job.state == "CANCELLED" and not job.succeeded and job.done
    assert job.failure_reason == "cancelled by request"
    assert 0 < job.step < 10_000_000
    with pytest.raises(JobFailedError, match="CANCELLED"):
        job.wait(timeout=5, raise_on_failure=True)
    with pytest.raises(FailedPreconditionError):
        job.cancel()  # already ended


def test_wait_times_out(client):
    job = client.submit(tiny_job(10_000_000))
    with pytest.raises(TimeoutError):
        job.wait(timeout=0.5)
    job.cancel()
    assert job.wait(timeout=60).state == "CANCELLED"


def test_get_and_delete(client):
    job = client.submit(tiny_job(5)).wait(timeout=120)
    job.delete()
    with pytest.raises(NotFoundError) as info:
        client.get(job.id)
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert info.value.resource.resource_type == "job"
    running = client.submit(tiny_job(10_000_000))
    with pytest.raises(FailedPreconditionError):
        running.delete()
    running.cancel()


def test_list_pages_through_every_job(client):
    ids = {client.submit(tiny_job(3, seed=i)).id for i in range(7)}
    for job_id in ids:
        client.get(job_id).wait(timeout=120)
    listed = [j.id for j in client.list(page_size=2)]
    assert len(listed) == len(set(listed)), "a job was listed twice"
    assert ids <= set(listed)
    assert len(listed) == len(list(client.list()))  # the same with the default page size
    succeeded = [j.id for j in client.list(state="SUCCEEDED", page_size=3)]
    assert ids <= set(succeeded)
    assert all(j.state == "SUCCEEDED" for j in client.list(state=v1.SUCCEEDED))
    assert not ids & {j.id for j in client.list(state=["QUEUED", "RUNNING"])}
    with pytest.raises(ValueError, match="unknown job state"):
        list(client.list(state="DONE"))


# -- resuming a broken stream -------------------------------------------------


def test_metrics_resume_after_the_call_is_cut(client):
    job = client.submit(tiny_job(120)).wait(timeout=120)
    reference = list(job.metrics())
    stream = job.metrics()
    events = []
    for event in stream:
        events.append(event)
        if len(events) in (1, 2, 5, 40, 41):  # cut it, again and again
            stream._drop()
    assert stream.reconnects == 5
    assert raw(events) == raw(reference), "the resumed stream has a gap or a duplicate"
    assert [e.step for e in events if e.kind == "step"] == list(range(1, 121))


class TcpProxy:
    """A loopback TCP forwarder whose connections can be dropped, as a network
    would: the client sees the connection go, not a cancelled call."""

    def __init__(self, port):
        self._target = ("127.0.0.1", port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets = []
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._sockets += [conn, upstream]
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop(self):
        """Cuts every open connection (the listener stays)."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.dropped += 1

    def close(self):
        self._listener.close()
        self.drop()


def test_metrics_resume_after_the_connection_drops(ampd, client):
    proxy = TcpProxy(ampd.port)
    try:
        with Client("127.0.0.1:%d" % proxy.port, timeout=30) as through_proxy:
            job = through_proxy.submit(slow_job(400))
            stream = job.metrics(reconnect_timeout=30)
            events, state_at_drop = [], []
            for event in stream:
                events.append(event)
                if event.kind == "step" and event.step in (20, 150):
                    state_at_drop.append(client.get(job.id).state)
                    proxy.drop()
            assert proxy.dropped == 2 and stream.reconnects >= 2
            assert events[-1].state == "SUCCEEDED"
    finally:
        proxy.close()
    # The job was still training when the first connection went: the stream
    # resumed on live events, not only on the recorded history.
    assert state_at_drop[0] == "RUNNING"
    reference = list(client.get(job.id).metrics())
    assert raw(events) == raw(reference), "the resumed stream has a gap or a duplicate"
    assert [e.step for e in events if e.kind == "step"] == list(range(1, 401))


def test_metrics_give_up_when_the_server_stays_away(ampd):
    proxy = TcpProxy(ampd.port)
    with Client("127.0.0.1:%d" % proxy.port, timeout=30) as c:
        job = c.submit(tiny_job(10_000_000))
        try:
            stream = job.metrics(reconnect_timeout=1.0)
            with pytest.raises(AmpdError) as info:
                for event in stream:
                    if event.kind == "step":
                        proxy.close()  # listener gone: every reconnect fails
            assert info.value.code == grpc.StatusCode.UNAVAILABLE
        finally:
            with Client(ampd.address) as direct:
                direct.cancel(job.id)


def test_metrics_without_reconnect_raise_on_a_drop(client):
    job = client.submit(tiny_job(200)).wait(timeout=120)
    stream = job.metrics(reconnect=False)
    next(stream)
    stream._drop()
    with pytest.raises(AmpdError) as info:
        list(stream)
    assert info.value.code == grpc.StatusCode.CANCELLED


def test_heartbeats_only_when_asked(ampd, client):
    # Two workers, two long jobs: a third one waits in the queue.
    blockers = [client.submit(tiny_job(10_000_000)) for _ in range(2)]
    queued = client.submit(tiny_job(5))
    stream = queued.metrics(heartbeats=True)
    seen = []
    for event in stream:
        seen.append(event)
        if event.kind == "heartbeat":
            break
    stream.close()
    assert seen[-1].kind == "heartbeat" and seen[-1].queue_position >= 0
    for b in blockers:
        b.cancel()
    assert queued.wait(timeout=120).succeeded


# -- precision ----------------------------------------------------------------


def test_capabilities(client):
    caps = client.capabilities()
    assert caps.server_version.startswith("ampd")
    cpu = [d for d in caps.devices if d.kind == v1.DEVICE_CPU]
    assert len(cpu) == 1 and "32-true" in cpu[0].precision_modes
    assert client.precision_modes("cpu") == list(cpu[0].precision_modes)
    # The CPU runs every mode (bf16 widened where it is not native, FP8
    # emulated): the client's list of built-ins is the server's.
    assert list(cpu[0].precision_modes) == list(ampd_client.precision.BUILTIN_MODES)


def test_explain(client):
    model = {"mlp": {"inputDim": 784, "hidden": [256, 256], "numClasses": 10}}
    every = client.explain(model)
    names = [e.precision for e in every]
    assert {"32-true", "16-mixed", "bf16-mixed"} <= set(names)
    by_name = {e.precision: precision.summary(e) for e in every}
    params = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert by_name["32-true"]["parameter_count"] == params
    assert by_name["32-true"]["memory"]["weights_bytes"] == 4 * params
    assert by_name["16-true"]["memory"]["weights_bytes"] == 2 * params
    assert all(m["memory"]["total_bytes"] > 0 for m in by_name.values())
    mixed_ops = by_name["bf16-mixed"]["ops"]
    assert any(o["compute"] == "bf16" for o in mixed_ops)
    assert all(o["compute"] == "f32" for o in by_name["32-true"]["ops"])
    text = precision.table(every)
    assert text.splitlines()[0].split()[0] == "precision" and "bf16-mixed" in text

    # A job spec: its own precision unless one is given.
    spec = tiny_job(10, profile="16-mixed")
    assert [e.precision for e in client.explain(spec)] == ["16-mixed"]
    assert [e.precision for e in client.explain(spec, "bf16-mixed")] == ["bf16-mixed"]
    custom = client.explain(spec, {"base": "16-mixed", "fp32Layers": ["head"]})
    assert len(custom) == 1 and custom[0].parameter_count == 8 * 16 + 16 + 16 * 3 + 3
    with pytest.raises(InvalidArgumentError) as info:
        client.explain(model, batch_size=-1)
    assert info.value.fields == ["batch_size"]


def test_optimizer_aliases_in_specs():
    from ampd_client import _specs
    spec = _specs.job_spec({"optimizer": "adamw8bit", "training": {"steps": 3}})
    assert spec.optimizer.HasField("adamw") and spec.optimizer.adamw.state_bits == 8
    assert _specs.job_spec('{"optimizer": "SGD8bit"}').optimizer.sgd.state_bits == 8
    assert _specs.job_spec({"optimizer": "adamw"}).optimizer.adamw.state_bits == 0
    with pytest.raises(ampd_client.SpecError, match='optimizer: unknown name "lion"'):
        _specs.job_spec({"optimizer": "lion"})


def test_precision_spec_helpers():
    assert precision.spec("bf16-mixed").profile == "bf16-mixed"
    assert precision.spec("profiles/mine").profile == "mine"
    custom = precision.spec({"base": "16-mixed", "opPolicies": {"gelu": "CAST_POLICY_FP32"}})
    assert custom.custom.base == "16-mixed"
    assert custom.custom.op_policies["gelu"] == v1.CAST_POLICY_FP32
    assert precision.spec({"profile": "16-mixed"}).profile == "16-mixed"
    assert precision.config("bf16-true").base == "bf16-true"
    assert precision.dtype_name(v1.DTYPE_BF16) == "bf16"
    assert precision.policy_name(v1.CAST_POLICY_LOWER_PRECISION) == "lower_precision"
    assert precision.format_bytes(3 * 1024 * 1024) == "3.0 MiB"
    with pytest.raises(SpecError):
        precision.spec({"base": "16-mixed", "notAField": 1})


def test_profiles(client):
    builtin = client.profiles()
    assert builtin[0].builtin and builtin[0].name == "profiles/32-true"
    profile_id = "py-" + uuid.uuid4().hex[:8]
    created = client.create_profile(profile_id, {"base": "16-mixed", "fp32Layers": ["head"]},
                                    description="f16 with an f32 head")
    assert created.name == "profiles/" + profile_id and not created.builtin
    assert created.config.fp32_layers == ["head"]
    assert client.profile(profile_id).description == "f16 with an f32 head"
    assert "profiles/" + profile_id in [p.name for p in client.profiles()]
    job = client.submit(tiny_job(10, profile=profile_id)).wait(timeout=120)
    assert job.succeeded
    client.delete_profile(profile_id)
    with pytest.raises(NotFoundError):
        client.profile(profile_id)
    with pytest.raises(InvalidArgumentError) as info:
        client.create_profile("Bad Id", "16-mixed")
    assert "profile_id" in info.value.fields
    with pytest.raises(FailedPreconditionError):
        client.delete_profile("bf16-mixed")


def test_submit_an_example_file_and_cancel_it(client):
    path = os.path.join(REPO, "examples", "fashion_mlp_bf16.json")
    job = client.submit(path)
    assert job.spec.display_name == "fashion-mnist MLP, bf16-mixed"
    assert job.spec.precision.profile == "bf16-mixed" and job.precision == "bf16-mixed"
    assert job.spec.training.epochs == 2 and job.spec.training.batch_size == 128
    assert job.spec.schedule.kind == v1.ScheduleSpec.KIND_WARMUP_COSINE
    job.cancel()  # not trained to the end here
    assert job.wait(timeout=120).state == "CANCELLED"
    # Its explanation needs no training at all.
    [plan] = client.explain(path)
    assert plan.precision == "bf16-mixed" and plan.parameter_count > 0


def test_default_target_and_unreachable_server(monkeypatch):
    monkeypatch.setenv("AMPD_SERVER", "127.0.0.1:1")
    with Client(timeout=2, retries=2) as c:
        assert c.target == "127.0.0.1:1"
        with pytest.raises(ampd_client.UnavailableError) as info:
            c.capabilities()
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(ampd_client.UnavailableError):
            c.wait_ready(timeout=0.2)
    monkeypatch.delenv("AMPD_SERVER")
    with Client() as c:
        assert c.target == ampd_client.DEFAULT_TARGET


# -- security -----------------------------------------------------------------


def test_token_authentication_and_job_ownership(tmp_path):
    import hashlib

    from conftest import AmpdServer

    def line(token, principal, role):
        return "%s %s %s\n" % (hashlib.sha256(token.encode()).hexdigest(), principal, role)

    tokens = tmp_path / "tokens.txt"
    tokens.write_text("# principals\n" + line("alice-token", "alice", "user") +
                      line("bob-token", "bob", "user") + line("root-token", "root", "admin"))
    server = AmpdServer(str(tmp_path / "ampd"), ["--tokens_file=%s" % tokens])
    try:
        with Client(server.address, timeout=30, retries=1) as anonymous:
            with pytest.raises(AmpdError) as error:
                anonymous.capabilities()
            assert error.value.code == grpc.StatusCode.UNAUTHENTICATED
        with Client(server.address, timeout=30, token="alice-token") as alice, \
                Client(server.address, timeout=30, token="bob-token") as bob, \
                Client(server.address, timeout=30, token="root-token") as root:
            job = alice.submit(tiny_job(10))
            assert job.wait(timeout=60).succeeded
            assert job.to_dict()["owner"] == "alice"
            with pytest.raises(NotFoundError):
                bob.get(job.name)
            assert job.name not in [j.name for j in list(bob.list())]
            assert job.name in [j.name for j in list(alice.list())]
            assert root.get(job.name).name == job.name
    finally:
        server.stop()


def tiny_gpt_job(steps=20):
    return {"model": {"gpt": {"blockSize": 16, "nLayer": 1, "nHead": 2, "nEmbd": 32}},
            "data": {"builtin": "fortunes"},
            "training": {"steps": steps, "batchSize": 4}}


def test_a_language_model_job_reports_val_loss_not_accuracy(client):
    spec = tiny_gpt_job()
    spec["training"]["evalInterval"] = spec["training"]["steps"]
    job = client.submit(spec).wait(timeout=120, raise_on_failure=True)
    assert job.is_language_model
    assert job.accuracy is None  # the eval record's accuracy field is 0 for it
    assert job.val_loss == job.latest_eval.loss and 0 < job.val_loss < 10
    assert job.bits_per_byte == pytest.approx(job.val_loss / math.log(2), rel=1e-9)
    assert job.optimizer_state_bytes > 0
    assert " val_loss %.4f " % job.val_loss in repr(job)
    mlp = client.submit(tiny_job(10)).wait(timeout=120, raise_on_failure=True)
    assert not mlp.is_language_model and mlp.bits_per_byte is None
    assert mlp.accuracy is not None and mlp.val_loss == mlp.latest_eval.loss


def test_generate_iterates_text_and_reproduces_with_the_seed(client):
    job = client.submit(tiny_gpt_job()).wait(timeout=120, raise_on_failure=True)
    gen = job.generate("The ", max_new_tokens=30, seed=5, top_k=20)
    pieces = list(gen)
    assert all(isinstance(p, str) for p in pieces)
    assert "".join(pieces) == gen.text and gen.text
    assert len(gen.tokens) == 30 and gen.done
    assert gen.seed == 5 and gen.artifact == "model.safetensors" and gen.byte_level
    assert gen.tokens_per_second > 0
    again = job.generate("The ", max_new_tokens=30, seed=5, top_k=20)
    assert "".join(again) == gen.text
    # No seed: a random one, reported, that gives the text again.
    free = job.generate("The ", max_new_tokens=10)
    text = "".join(free)
    assert "".join(job.generate("The ", max_new_tokens=10, seed=free.seed)) == text
    # Token ids in, for a byte-level model too: text out, greedy twice the same.
    ids = [ord(c) for c in "The "]
    assert "".join(job.generate(ids, max_new_tokens=10, temperature=0)) == \
        "".join(job.generate("The ", max_new_tokens=10, temperature=0, seed=9))


def test_generate_errors_name_the_field_and_close_cancels(client):
    job = client.submit(tiny_gpt_job()).wait(timeout=120, raise_on_failure=True)
    with pytest.raises(InvalidArgumentError) as e:
        list(job.generate("x", temperature=-1))
    assert e.value.fields == ["temperature"]
    with pytest.raises(InvalidArgumentError) as e:
        list(job.generate("x", top_p=0))
    assert e.value.fields == ["top_p"]
    mlp = client.submit(tiny_job(2)).wait(timeout=60)
    with pytest.raises(FailedPreconditionError):
        list(mlp.generate("x"))
    # close() mid-stream: the iteration ends quietly, long before 65536 tokens.
    with job.generate("The ", max_new_tokens=65536) as gen:
        for i, _ in enumerate(gen):
            if i == 3:
                gen.close()
    assert not gen.done and len(gen.tokens) < 65536
