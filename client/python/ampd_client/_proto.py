"""The generated ampd.v1 modules (ampd_client/_gen/, written at build time)."""
try:
    from ._gen.ampd.v1 import job_spec_pb2
    from ._gen.ampd.v1 import precision_service_pb2
    from ._gen.ampd.v1 import precision_service_pb2_grpc
    from ._gen.ampd.v1 import training_service_pb2
    from ._gen.ampd.v1 import training_service_pb2_grpc
except ImportError as e:  # pragma: no cover - only in a broken or uninstalled tree
    if "_gen" not in str(e):
        raise
    raise ImportError(
        "ampd_client: the generated gRPC stubs (ampd_client/_gen) are missing. Install the "
        "package (pip install ./client/python) instead of importing it from the source "
        "tree.") from e

__all__ = [
    "job_spec_pb2",
    "precision_service_pb2",
    "precision_service_pb2_grpc",
    "training_service_pb2",
    "training_service_pb2_grpc",
]
