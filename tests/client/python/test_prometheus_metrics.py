"""ampd's Prometheus endpoint, scraped with a plain HTTP client during a job.

The exposition text is parsed here (name{labels} value lines, # HELP/# TYPE
comments) and the values checked for plausibility: a running job's step
grows between scrapes, the RUNNING gauge is 1 while it trains and 0 after,
RPCs are counted by method and code, checkpoints by count, bytes and time.
"""
import math
import re
import time
import urllib.error
import urllib.request

import pytest

from ampd_client import AmpdError, Client
from conftest import AmpdServer

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    """{(name, frozenset(labels)): value}, and {name: type} from # TYPE lines."""
    samples, types = {}, {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not exposition format: %r" % line
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples, types


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse_exposition(r.read().decode())


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def metrics_server(tmp_path, extra=()):
    port_file = tmp_path / "metrics_port"
    server = AmpdServer(str(tmp_path / "ampd"), ["--metrics_listen=127.0.0.1:0",
                                                 "--metrics_port_file=%s" % port_file,
                                                 "--checkpoint_every_steps=100"] + list(extra))
    return server, int(port_file.read_text())


def test_metrics_during_and_after_a_job(tmp_path):
    server, port = metrics_server(tmp_path)
    try:
        samples, _ = scrape(port)
        assert value(samples, "ampd_jobs", state="RUNNING") == 0
        with Client(server.address, timeout=30) as c:
            job = c.submit({"model": {"mlp": {"hidden": [64]}},
                            "data": {"synthetic": {"numExamples": 512, "featureDim": 32,
                                                   "numClasses": 4}},
                            "precision": {"profile": "16-mixed"},
                            "training": {"steps": 1000000, "batchSize": 32}})
            with pytest.raises(AmpdError):
                c.submit({"training": {"batchSize": 0}})
            deadline = time.monotonic() + 60
            while job.refresh().step < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            stream = iter(job.metrics(heartbeats=True))
            next(stream)  # the stream is open now
            first, _ = scrape(port)
            time.sleep(0.5)
            second, types = scrape(port)
            assert types["ampd_rpcs_total"] == "counter"
            assert types["ampd_rpc_duration_seconds"] == "histogram"
            assert types["ampd_jobs"] == "gauge"

            assert value(first, "ampd_jobs", state="RUNNING") == 1
            assert value(first, "ampd_queue_depth") == 0
            step1 = value(first, "ampd_job_step", job=job.id)
            step2 = value(second, "ampd_job_step", job=job.id)
            assert 0 < step1 < step2, (step1, step2)
            assert value(second, "ampd_job_steps_per_second", job=job.id) > 0
            assert value(second, "ampd_job_samples_per_second", job=job.id) > 0
            scale = value(second, "ampd_job_loss_scale", job=job.id)  # GradScaler: 2^16, growing
            assert scale >= 1 and math.log2(scale).is_integer(), scale
            assert value(second, "ampd_job_skipped_steps", job=job.id) >= 0
            assert value(second, "ampd_open_streams") >= 1
            create = "/ampd.v1.TrainingService/CreateJob"
            assert value(second, "ampd_rpcs_total", method=create, code="OK") == 1
            assert value(second, "ampd_rpcs_total", method=create, code="INVALID_ARGUMENT") == 1
            assert value(second, "ampd_rpc_duration_seconds_count", method=create, code="OK") == 1
            assert value(second, "ampd_rpc_duration_seconds_sum", method=create, code="OK") > 0
            assert value(second, "ampd_resident_memory_bytes") > 10 * 2**20
            assert value(second, "ampd_device_memory_in_use_bytes", device="cpu") == 0

            # Tokens per second and MFU for language models only.
            assert value(second, "ampd_job_tokens_per_second", job=job.id) is None
            assert value(second, "ampd_job_mfu", job=job.id) is None
            while job.refresh().step < 250 and time.monotonic() < deadline:
                time.sleep(0.05)
            job.cancel()
            job.wait(timeout=60)
        after, _ = scrape(port)
        assert value(after, "ampd_jobs", state="RUNNING") == 0
        assert value(after, "ampd_jobs", state="CANCELLED") == 1
        assert value(after, "ampd_job_step", job=job.id) is None  # only running jobs
        assert value(after, "ampd_checkpoints_total") >= 2  # steps 100, 200 and the cancel's
        assert value(after, "ampd_checkpoint_bytes_total") > 1000
        assert value(after, "ampd_checkpoint_write_seconds_count") == \
            value(after, "ampd_checkpoints_total")
        # Once the store has all of the ended job, it leaves memory (and is
        # still counted by state, and still readable).
        deadline = time.monotonic() + 30
        while value(after, "ampd_jobs_in_memory") != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            after, _ = scrape(port)
        assert value(after, "ampd_jobs_in_memory") == 0
        assert value(after, "ampd_jobs", state="CANCELLED") == 1
        assert 0 < value(after, "ampd_ended_job_cache_bytes") <= 16 * 2**20
        # Fan-out: each event is serialized once, whatever the number of streams.
        with Client(server.address, timeout=30) as c:
            before, _ = scrape(port)
            counts = [len(list(c.get(job.name).metrics(reconnect=False))) for _ in range(5)]
            after_streams, _ = scrape(port)
        assert len(set(counts)) == 1 and counts[0] > 250, counts
        serialized = (value(after_streams, "ampd_stream_event_serializations_total") -
                      value(before, "ampd_stream_event_serializations_total"))
        assert serialized <= counts[0], (serialized, counts)  # not 5x
        assert value(after_streams, "ampd_stream_event_serializations_total") >= counts[0]
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("http://127.0.0.1:%d/other" % port, timeout=10)
        assert e.value.code == 404
    finally:
        server.stop()


def test_a_language_model_exports_tokens_per_second_and_mfu(tmp_path):
    server, port = metrics_server(tmp_path)
    try:
        with Client(server.address, timeout=30) as c:
            gpt = c.submit({"model": {"gpt": {"blockSize": 16, "nLayer": 1, "nHead": 2,
                                              "nEmbd": 32}},
                            "data": {"builtin": "fortunes"},
                            "training": {"steps": 1000000, "batchSize": 4}})
            deadline = time.monotonic() + 60
            while gpt.refresh().step < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            samples, types = scrape(port)
            gpt.cancel()
            gpt.wait(timeout=60)
        assert types["ampd_job_tokens_per_second"] == "gauge"
        assert types["ampd_job_mfu"] == "gauge"
        # The same step's rates: a sample is a window of blockSize tokens.
        tokens = value(samples, "ampd_job_tokens_per_second", job=gpt.id)
        windows = value(samples, "ampd_job_samples_per_second", job=gpt.id)
        assert tokens > 0 and tokens == pytest.approx(16 * windows, rel=1e-6), (tokens, windows)
        assert 0 < value(samples, "ampd_job_mfu", job=gpt.id) <= 1
    finally:
        server.stop()


def test_a_metrics_address_off_loopback_needs_insecure(tmp_path):
    workdir = tmp_path / "ampd"
    with pytest.raises(BaseException) as failed:
        AmpdServer(str(workdir), ["--metrics_listen=0.0.0.0:0"])
    assert "pass --insecure" in str(failed.value)
