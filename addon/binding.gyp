{
  "targets": [{
    "target_name": "vhost_user_native",
    "sources": [
      "src/vhost-user/addon.cc",
      "src/vhost-user/errors.cc",
      "src/vhost-user/socket.cc",
      "src/vhost-user/memory.cc",
      "src/vhost-user/eventfd.cc",
      "src/vhost-user/watcher.cc"
    ],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-O2"]
  }, {
    "target_name": "vhost_user_bench",
    "sources": [
      "src/vhost-user/bench_addon.cc",
      "src/vhost-user/errors.cc",
      "src/vhost-user/ring_loop.cc"
    ],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-O2"]
  }, {
    "target_name": "qcuda_sys",
    "sources": [
      "src/sys_addon.cc",
      "src/vhost-user/errors.cc",
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
