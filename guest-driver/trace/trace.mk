# The driver-call tracer (guest-driver/trace/README.md): a libcuda.so.1 that
# logs every driver entry point a program reaches and calls the real one.
# Included by the top-level Makefile.
#
#   trace    $(BUILD)/trace/libcuda.so.1 (the directory to put first on
#            LD_LIBRARY_PATH: nothing else is in it)
#
# gen-trace.mjs writes the wrappers from CUDA's headers at build time
# (nothing generated is committed); the GPU bundle carries the built shim.

TRACE_DIR := $(CURDIR)/guest-driver/trace
TRACE_GEN := $(BUILD)/trace-gen
TRACE_LIB := $(BUILD)/trace/libcuda.so.1
TRACE_SRCS := $(wildcard $(TRACE_DIR)/*.c) $(TRACE_GEN)/wrappers.c
TRACE_CFLAGS := -std=gnu11 -O2 -fPIC -Wall -Werror -fvisibility=hidden -D__CUDA_API_VERSION_INTERNAL \
	-I$(TRACE_DIR) -I$(CUDA_HOME)/include

.PHONY: trace
trace: $(TRACE_LIB)

$(TRACE_GEN)/wrappers.c: $(TRACE_DIR)/gen-trace.mjs $(GUEST_CU_DIR)/gen-libcuda.mjs $(GUEST_CU_HDRS)
	node $(TRACE_DIR)/gen-trace.mjs --cuda=$(CUDA_HOME) --out=$(TRACE_GEN)

# Only the cu* names are exported (-fvisibility=hidden; the wrappers are
# marked), under NVIDIA's soname.
$(TRACE_LIB): $(TRACE_SRCS) $(TRACE_DIR)/trace.h
	@mkdir -p $(@D)
	gcc $(TRACE_CFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,-z,defs -o $@ $(TRACE_SRCS) -ldl -lpthread
