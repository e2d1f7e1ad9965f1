{
  "targets": [{
    "target_name": "qcuda_native",
    "sources": [
      "src/addon.cc",
      "src/errors.cc",
      "src/socket.cc",
      "src/memory.cc",
      "src/eventfd.cc",
      "src/watcher.cc",
      "src/ledger.cc",
      "src/ring_loop.cc",
      "src/sandbox.cc"
    ],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-O2"],
    "libraries": ["-ldl"]
  }, {
    "target_name": "qcuda_cuda",
    "sources": [
      "src/cuda_api.cc",
      "src/cuda_args.cc",
      "src/given.cc",
      "src/cuda_check.cc",
      "src/cuda_context.cc",
      "src/cuda_ctx_arrays.cc",
      "src/cuda_ctx_graphs.cc",
      "src/cuda_ctx_launch.cc",
      "src/cuda_ctx_link.cc",
      "src/cuda_ctx_memory.cc",
      "src/cuda_ctx_modules.cc",
      "src/cuda_ctx_streams.cc",
      "src/cuda_ctx_vmm.cc",
      "src/cuda_exec.cc",
      "src/cuda_image.cc",
      "src/cuda_module.cc",
      "src/cuda_output.cc",
      "src/cuda_ring_server.cc",
      "src/guest_ring.cc"
    ],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "/usr/local/cuda/include", "../guest-driver/include"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-O2"],
    "libraries": ["-ldl", "-lpthread"]
  }]
}
