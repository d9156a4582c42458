#!/usr/bin/env python3
"""Build support for the ampd-client package (standard library only).

setup.py uses it to generate the gRPC stubs from the repository's proto/ into
ampd_client/_gen/ at build time, and to stamp the build with a hash of the
sources it was built from. tools/setup and the tests use the stamp to tell
whether the installed package is current:

  python3 client/python/ampd_build.py --check-installed   # exit 0: installed build is current
  python3 client/python/ampd_build.py --hash              # prints the sources' hash

Where the .proto files come from, first match wins: $AMPD_PROTO_DIR; ../../proto
(this directory inside the repository); ./proto (the copy an sdist carries).
"""
import glob
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "ampd_client"
DIST_NAME = "ampd-client"
# The API's protos, relative to the proto root. google/rpc/* is not generated:
# error details are read with googleapis-common-protos (the standard copies),
# so the two never clash in protobuf's default descriptor pool.
PROTO_PACKAGE_DIR = "ampd"
_MARKER = os.path.join("ampd", "v1", "training_service.proto")
# Package files whose content decides what gets built (besides the protos).
_TOP_FILES = ("pyproject.toml", "setup.py", "ampd_build.py", "MANIFEST.in", "README.md")


def find_proto_root(here=HERE):
    candidates = []
    if os.environ.get("AMPD_PROTO_DIR"):
        candidates.append(os.environ["AMPD_PROTO_DIR"])
    candidates += [os.path.join(here, "..", "..", "proto"), os.path.join(here, "proto")]
    for c in candidates:
        if os.path.isfile(os.path.join(c, _MARKER)):
            return os.path.normpath(c)
    raise FileNotFoundError(
        "ampd-client: cannot find the .proto files (looked for %s under: %s). Build from the "
        "ampd repository (pip install ./client/python) or from an sdist, or set AMPD_PROTO_DIR."
        % (_MARKER, ", ".join(os.path.normpath(c) for c in candidates)))


def proto_files(proto_root):
    """The API's .proto files, as sorted paths relative to proto_root."""
    out = []
    for path in glob.glob(os.path.join(proto_root, PROTO_PACKAGE_DIR, "**", "*.proto"),
                          recursive=True):
        out.append(os.path.relpath(path, proto_root).replace(os.sep, "/"))
    return sorted(out)


def package_sources(here=HERE):
    """(label, path) for every package file that goes into the hash."""
    files = [(name, os.path.join(here, name)) for name in _TOP_FILES
             if os.path.isfile(os.path.join(here, name))]
    pkg = os.path.join(here, PACKAGE)
    for path in glob.glob(os.path.join(pkg, "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, here).replace(os.sep, "/")
        if rel.startswith(PACKAGE + "/_gen/") or rel == PACKAGE + "/_build_info.py":
            continue
        files.append((rel, path))
    return sorted(files)


def source_hash(here=HERE, proto_root=None):
    """sha256 over the package's sources and the API protos (paths and contents)."""
    proto_root = proto_root or find_proto_root(here)
    entries = [("client/python/" + label, path) for label, path in package_sources(here)]
    entries += [("proto/" + rel, os.path.join(proto_root, rel)) for rel in proto_files(proto_root)]
    h = hashlib.sha256()
    for label, path in entries:
        with open(path, "rb") as f:
            data = f.read()
        h.update(b"%s\0%d\0" % (label.encode(), len(data)))
        h.update(data)
    return h.hexdigest()


def _grpc_tools():
    try:
        from grpc_tools import protoc
    except ImportError as e:  # pragma: no cover - a build-environment problem
        raise RuntimeError(
            "ampd-client: building needs grpcio-tools (a build requirement in pyproject.toml); "
            "install it or let pip build in an isolated environment") from e
    return protoc


def _protoc(proto_root, out_dir):
    protoc = _grpc_tools()
    import grpc_tools
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["grpc_tools.protoc", "-I" + proto_root, "-I" + well_known,
            "--python_out=" + out_dir, "--pyi_out=" + out_dir, "--grpc_python_out=" + out_dir]
    args += proto_files(proto_root)
    if protoc.main(args) != 0:
        raise RuntimeError("ampd-client: protoc failed on the protos in " + proto_root)


_FROM_IMPORT = re.compile(r"^(\s*)from ampd\.v1 import ", re.M)
_PLAIN_IMPORT = re.compile(r"^(\s*)import ampd\.v1\.", re.M)


def _rewrite_imports(text):
    # protoc writes absolute imports ("from ampd.v1 import job_spec_pb2"); inside
    # the package they must name ampd_client._gen.ampd.v1.
    text = _FROM_IMPORT.sub(r"\1from %s._gen.ampd.v1 import " % PACKAGE, text)
    return _PLAIN_IMPORT.sub(r"\1import %s._gen.ampd.v1." % PACKAGE, text)


def _versions(gen_dir):
    info = {"protobuf_gencode": None, "grpc_generated": None}
    for path in sorted(glob.glob(os.path.join(gen_dir, "**", "*.py"), recursive=True)):
        with open(path) as f:
            text = f.read()
        m = re.search(r"^# Protobuf Python Version: (\S+)", text, re.M)
        if m and not info["protobuf_gencode"]:
            info["protobuf_gencode"] = m.group(1)
        m = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'", text, re.M)
        if m and not info["grpc_generated"]:
            info["grpc_generated"] = m.group(1)
    return info


_version_cache = {}


def generated_versions(proto_root=None):
    """Which protobuf / grpcio versions the installed grpcio-tools generates code for."""
    proto_root = proto_root or find_proto_root()
    if proto_root not in _version_cache:
        tmp = tempfile.mkdtemp(prefix="ampd_client_gen_")
        try:
            _protoc(proto_root, tmp)
            _version_cache[proto_root] = _versions(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _version_cache[proto_root]


def runtime_requirements(proto_root=None):
    """install_requires matching the generated code: its runtime checks refuse an
    older protobuf or grpcio than the generator's."""
    v = generated_versions(proto_root)
    reqs = ["googleapis-common-protos>=1.56"]
    pb = v["protobuf_gencode"]
    if pb and re.match(r"^\d+\.\d+\.\d+$", pb):
        reqs.append("protobuf>=%s,<%d" % (pb, int(pb.split(".")[0]) + 1))
    else:
        reqs.append("protobuf>=4.21")
    reqs.append("grpcio>=%s" % v["grpc_generated"] if v["grpc_generated"] else "grpcio>=1.50")
    return reqs


def generate(package_dir, proto_root=None, here=HERE):
    """Writes <package_dir>/_gen/ (stubs) and <package_dir>/_build_info.py."""
    proto_root = proto_root or find_proto_root(here)
    gen = os.path.join(package_dir, "_gen")
    tmp = tempfile.mkdtemp(prefix="ampd_client_gen_")
    try:
        _protoc(proto_root, tmp)
        versions = _versions(tmp)
        shutil.rmtree(gen, ignore_errors=True)
        for root, _, files in os.walk(tmp):
            rel = os.path.relpath(root, tmp)
            dest = os.path.normpath(os.path.join(gen, rel))
            os.makedirs(dest, exist_ok=True)
            for name in files:
                with open(os.path.join(root, name)) as f:
                    text = f.read()
                if name.endswith((".py", ".pyi")):
                    text = _rewrite_imports(text)
                with open(os.path.join(dest, name), "w") as f:
                    f.write(text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Every generated directory is a regular package.
    for root, _, files in os.walk(gen):
        if "__init__.py" not in files:
            with open(os.path.join(root, "__init__.py"), "w") as f:
                f.write("# Generated by ampd_build.py from the ampd protos. Do not edit.\n")
    import grpc_tools.grpc_version as gv
    with open(os.path.join(package_dir, "_build_info.py"), "w") as f:
        f.write("# Written by ampd_build.py when the package was built. Do not edit.\n")
        f.write("SOURCE_HASH = %r\n" % source_hash(here, proto_root))
        f.write("GRPCIO_TOOLS_VERSION = %r\n" % gv.VERSION)
        f.write("PROTOBUF_GENCODE_VERSION = %r\n" % versions["protobuf_gencode"])
        f.write("GRPC_GENERATED_VERSION = %r\n" % versions["grpc_generated"])
    return versions


def _read_build_info(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    return dict(re.findall(r"^([A-Z_]+) = '([^']*)'", text, re.M))


def installed_build_info():
    """The installed ampd-client's _build_info values (SOURCE_HASH, ...), or None."""
    import importlib.metadata as md
    # Never mistake this source tree (or an in-tree egg-info) for the installed copy.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    try:
        dist = md.distribution(DIST_NAME)
    except md.PackageNotFoundError:
        return None
    found = _read_build_info(str(dist.locate_file(PACKAGE + "/_build_info.py")))
    if found:
        return found
    # An editable install keeps the package (and its stamp) in the source tree.
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        direct = {}
    url = direct.get("url", "")
    if direct.get("dir_info", {}).get("editable") and url.startswith("file://"):
        return _read_build_info(os.path.join(url[len("file://"):], PACKAGE, "_build_info.py"))
    return None


def _version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v or "")[:3])


def installed_is_current():
    """True when the installed ampd-client was built from these sources and the
    protobuf / grpcio installed beside it are still new enough for its stubs
    (another package's install may have downgraded them)."""
    info = installed_build_info()
    if not info or info.get("SOURCE_HASH") != source_hash():
        return False
    import importlib.metadata as md
    for dist, needed in (("protobuf", info.get("PROTOBUF_GENCODE_VERSION")),
                         ("grpcio", info.get("GRPC_GENERATED_VERSION"))):
        try:
            have = md.version(dist)
        except md.PackageNotFoundError:
            return False
        if _version_tuple(have) < _version_tuple(needed):
            return False
    return True


def main(argv):
    if argv[1:] == ["--hash"]:
        print(source_hash())
        return 0
    if argv[1:] == ["--check-installed"]:
        return 0 if installed_is_current() else 1
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
