# vhost-user-ts's native code: its targets, owned by the package. A
# binding.gyp that builds the library's addons includes this file (qcuda's
# addon/binding.gyp does); gyp reads the paths here relative to this folder.
#
#   vhost_user_native  the system calls the library needs (platform/native.ts)
#   vhost_user_bench   the benchmarks' guest driver loop (frontend/guest-ring.ts)
#   vhost_user_errors  errno and argument errors as JS exceptions (errors.h),
#                      for these and for an embedder's own addon
#
# A target that depends on vhost_user_errors links it and may include the
# library's headers by their package path: "vhost-user/native/errors.h",
# "vhost-user/native/split_ring.h", "vhost-user/native/typed_view.h".
{
  "targets": [{
    "target_name": "vhost_user_errors",
    "type": "static_library",
    "sources": ["errors.cc"],
    "direct_dependent_settings": {"include_dirs": ["../.."]},
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-O2"]
  }, {
    "target_name": "vhost_user_native",
    "dependencies": ["vhost_user_errors"],
    "sources": ["addon.cc", "socket.cc", "memory.cc", "eventfd.cc", "watcher.cc"],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-O2"]
  }, {
    "target_name": "vhost_user_bench",
    "dependencies": ["vhost_user_errors"],
    "sources": ["bench_addon.cc", "ring_loop.cc"],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-O2"]
  }]
}
