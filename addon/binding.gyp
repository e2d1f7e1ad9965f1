# qcuda's native addons. The vhost-user library's own (vhost_user_native,
# vhost_user_bench, and the errors both share with qcuda_sys) are the
# package's: backend/src/vhost-user/native/vhost-user.gypi, included here so
# that all of them build into addon/build/Release/.
{
  "includes": ["../backend/src/vhost-user/native/vhost-user.gypi"],
  "targets": [{
    "target_name": "qcuda_sys",
    "dependencies": ["vhost_user_errors"],
    "sources": [
      "src/sys_addon.cc",
      "src/ledger.cc",
      "src/sandbox.cc",
      "src/share_table.cc",
      "src/sigbus_guard.cc"
    ],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-O2"]
  }, {
    "target_name": "qcuda_cuda",
    "dependencies": ["vhost_user_errors"],
    "sources": [
      "src/cuda_api.cc",
      "src/cuda_args.cc",
      "src/given.cc",
      "src/cuda_check.cc",
      "src/cuda_context.cc",
      "src/cuda_ctx_arrays.cc",
      "src/cuda_ctx_calls.cc",
      "src/cuda_ctx_graphs.cc",
      "src/cuda_ctx_ipc.cc",
      "src/cuda_ctx_launch.cc",
      "src/cuda_ctx_link.cc",
      "src/cuda_ctx_memory.cc",
      "src/cuda_ctx_modules.cc",
      "src/cuda_ctx_peer.cc",
      "src/cuda_ctx_streams.cc",
      "src/cuda_ctx_tensor_map.cc",
      "src/cuda_ctx_vmm.cc",
      "src/cuda_exec.cc",
      "src/cuda_image.cc",
      "src/cuda_module.cc",
      "src/cuda_output.cc",
      "src/cuda_ring_server.cc",
      "src/guest_ring.cc",
      "src/ring_plan.cc",
      "src/share_table.cc"
    ],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "/usr/local/cuda/include", "../guest-driver/include"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-O2"],
    "libraries": ["-ldl", "-lpthread"]
  }]
}
