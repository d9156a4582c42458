"""cc_grpc_proto_library: .proto -> C++ messages, gRPC stubs and a descriptor set.

Uses Debian's protoc and grpc_cpp_plugin (symlinked into @system by
system_libs). Proto files are compiled relative to the package directory, so a
file proto/ampd/v1/x.proto is imported as "ampd/v1/x.proto" and its generated
header is included as "ampd/v1/x.pb.h".
"""

def cc_grpc_proto_library(name, srcs, deps = [], grpc = True, visibility = None):
    """deps: other cc_grpc_proto_library targets whose .proto files srcs import."""
    pkg = native.package_name()
    rel = [s for s in srcs]
    outs = []
    for s in rel:
        base = s[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    descriptor = name + "_descriptor_set.pb"
    dep_protos = [d + "_protos" for d in deps]
    native.filegroup(name = name + "_protos", srcs = srcs + dep_protos, visibility = visibility)
    plugin = "@system//:bin/grpc_cpp_plugin"
    protoc = "@system//:bin/protoc"
    cmd = [
        "$(location %s)" % protoc,
        "--proto_path=%s" % (pkg or "."),
        "--cpp_out=$(GENDIR)/%s" % pkg,
        "--descriptor_set_out=$(location %s)" % descriptor,
        "--include_imports",
        "--include_source_info",
    ]
    tools = [protoc]
    if grpc:
        cmd += [
            "--plugin=protoc-gen-grpc=$(location %s)" % plugin,
            "--grpc_out=$(GENDIR)/%s" % pkg,
        ]
        tools.append(plugin)
    cmd += ["$(locations %s)" % s for s in srcs]
    native.genrule(
        name = name + "_codegen",
        srcs = srcs + dep_protos,
        outs = outs + [descriptor],
        tools = tools,
        cmd = " ".join(cmd),
    )
    native.filegroup(name = name + "_descriptor_set", srcs = [descriptor], visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["@system//:protobuf"] + (["@system//:grpcpp"] if grpc else []),
        visibility = visibility,
    )
