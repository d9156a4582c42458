"""Re-exports of the native Java rules under the names @rules_java uses."""

java_import = native.java_import
java_runtime = native.java_runtime
java_toolchain = native.java_toolchain
java_binary = native.java_binary
java_library = native.java_library
