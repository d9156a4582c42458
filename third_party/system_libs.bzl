"""A repository rule that turns Debian's system libraries into cc_library targets.

Every system library the project links goes through here, so flags come from
one place (pkg-config) instead of -l lists copied around BUILD files. A library
without a .pc file (oneDNN 2.6 ships none) declares explicit fallback flags.
Missing packages fail the build with the Debian package to install.
"""

def _run_pkg_config(ctx, args):
    result = ctx.execute(["pkg-config"] + args)
    if result.return_code != 0:
        return None
    return result.stdout.strip()

def _split(flags):
    return [f for f in flags.split(" ") if f]

def _library(ctx, name, modules, fallback, debian_package):
    defines = []
    linkopts = []
    includes = []
    if modules:
        cflags = _run_pkg_config(ctx, ["--cflags"] + modules)
        libs = _run_pkg_config(ctx, ["--libs"] + modules)
        if cflags == None or libs == None:
            fail("system library '%s' needs pkg-config modules %s; install the Debian package %s (tools/setup does)" %
                 (name, modules, debian_package))
        for flag in _split(cflags):
            if flag.startswith("-D"):
                defines.append(flag[2:])
            elif flag.startswith("-I"):
                path = flag[2:]
                if path not in ("/usr/include", "/usr/local/include"):
                    link = "include/%s_%d" % (name, len(includes))
                    ctx.symlink(path, link)
                    includes.append(link)
        linkopts = _split(libs)
    else:
        if not fallback.get("header") or not ctx.path(fallback["header"]).exists:
            fail("system library '%s' needs %s; install the Debian package %s (tools/setup does)" %
                 (name, fallback.get("header"), debian_package))
        linkopts = fallback["linkopts"]
    return """
cc_library(
    name = "{name}",
    hdrs = {hdrs},
    includes = {includes},
    defines = {defines},
    linkopts = {linkopts},
)
""".format(
        name = name,
        hdrs = "glob([%s])" % ", ".join(['"%s/**"' % i for i in includes]) if includes else "[]",
        includes = repr(includes),
        defines = repr(defines),
        linkopts = repr(linkopts),
    )

def _tool(ctx, name, debian_package):
    path = ctx.which(name)
    if path == None:
        fail("tool '%s' not found; install the Debian package %s (tools/setup does)" % (name, debian_package))
    ctx.symlink(path, "bin/" + name)
    return 'exports_files(["bin/%s"])\n' % name

def _system_libs_impl(ctx):
    build = ['package(default_visibility = ["//visibility:public"])\n']
    for name, spec in ctx.attr.libs.items():
        # spec: "debian-package:module1,module2" or "debian-package:=header|-lflag,-lflag"
        package, rest = spec.split(":", 1)
        if rest.startswith("="):
            header, flags = rest[1:].split("|", 1)
            build.append(_library(ctx, name, [], {"header": header, "linkopts": flags.split(",")}, package))
        else:
            build.append(_library(ctx, name, rest.split(","), {}, package))
    for name, package in ctx.attr.tools.items():
        build.append(_tool(ctx, name, package))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    ctx.file("BUILD", "\n".join(build))

system_libs = repository_rule(
    implementation = _system_libs_impl,
    attrs = {
        "libs": attr.string_dict(doc = "target name -> 'debian-package:pkgconfig,modules' or 'debian-package:=/abs/header|-lflags'"),
        "tools": attr.string_dict(doc = "executable on PATH -> Debian package"),
    },
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)
