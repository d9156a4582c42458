"""Every ampd.v1 message and enum, by its proto name: v1.JobSpec, v1.JobState,
v1.PrecisionConfig, ... (the protoc-generated classes)."""
from . import _proto

_modules = (_proto.job_spec_pb2, _proto.training_service_pb2, _proto.precision_service_pb2)
__all__ = []
for _m in _modules:
    for _name in list(_m.DESCRIPTOR.message_types_by_name) + list(_m.DESCRIPTOR.enum_types_by_name):
        globals()[_name] = getattr(_m, _name)
        __all__.append(_name)
    for _name in _m.DESCRIPTOR.enum_types_by_name:
        # Enum values too (v1.SUCCEEDED, v1.DTYPE_BF16, ...), as protoc exports them.
        for _value in _m.DESCRIPTOR.enum_types_by_name[_name].values:
            globals()[_value.name] = _value.number
            __all__.append(_value.name)

TrainingServiceStub = _proto.training_service_pb2_grpc.TrainingServiceStub
PrecisionServiceStub = _proto.precision_service_pb2_grpc.PrecisionServiceStub
__all__ += ["TrainingServiceStub", "PrecisionServiceStub"]
for _n in ("_m", "_name", "_value", "_modules", "_n"):
    globals().pop(_n, None)
