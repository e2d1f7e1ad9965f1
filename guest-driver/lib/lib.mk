# qcuda's guest CUDA runtime (libcudart.so.13) and the guest CUDA test
# programs. Included by the top-level Makefile (SHELL=bash, BUILD defined
# there; GUEST_INCLUDE and GUEST_BIN come from guest-driver/guest.mk, which
# must be included first).
#
#   guest-lib            $(BUILD)/guest/lib/libcudart.so.13
#   guest-cuda-programs  $(BUILD)/guest/bin/<name> for each test/guest/<name>.cu
#                        (nvcc -cudart=shared -arch=sm_90; linked against
#                        NVIDIA's libcudart.so.13, they load ours in the guest)
#
# Both need CUDA 13's headers and nvcc (CUDA_HOME, default /usr/local/cuda);
# the library needs nothing of CUDA at run time.

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
GUEST_LIB_DIR := $(CURDIR)/guest-driver/lib
GUEST_LIB_OUT := $(BUILD)/guest/lib
GUEST_LIB_OBJ := $(BUILD)/guest/lib-obj
GUEST_CUDART := $(GUEST_LIB_OUT)/libcudart.so.13

GUEST_LIB_SRCS := $(wildcard $(GUEST_LIB_DIR)/*.c)
GUEST_LIB_OBJS := $(patsubst $(GUEST_LIB_DIR)/%.c,$(GUEST_LIB_OBJ)/%.o,$(GUEST_LIB_SRCS))
GUEST_LIB_CFLAGS := -std=gnu11 -O2 -g -fPIC -Wall -Wextra -Wno-unused-parameter \
	-fno-strict-aliasing -pthread -I$(GUEST_INCLUDE) -I$(CUDA_HOME)/include

GUEST_CUDA_PROGRAMS := $(patsubst $(CURDIR)/test/guest/%.cu,%,$(wildcard $(CURDIR)/test/guest/*.cu))
# Also built with --default-stream per-thread (the _ptds/_ptsz entry points).
GUEST_CUDA_PTDS := memcpy stream memadvise
# Programs of several translation units: test/guest/<name>.cu plus their
# parts in test/guest/parts/ (which the wildcard above does not see).
GUEST_CUDA_MULTI := multimodule multimodule_rdc
GUEST_CUDA_SINGLE := $(filter-out $(GUEST_CUDA_MULTI),$(GUEST_CUDA_PROGRAMS))
MULTIMODULE_PARTS := $(CURDIR)/test/guest/parts/multimodule_a.cu $(CURDIR)/test/guest/parts/multimodule_b.cu
MULTIMODULE_RDC_PARTS := $(CURDIR)/test/guest/parts/multimodule_rdc_a.cu \
	$(CURDIR)/test/guest/parts/multimodule_rdc_b.cu

.PHONY: guest-lib guest-cuda-programs

guest-lib: $(GUEST_CUDART)

$(GUEST_LIB_OBJ)/%.o: $(GUEST_LIB_DIR)/%.c $(wildcard $(GUEST_LIB_DIR)/*.h) \
		$(GUEST_INCLUDE)/qcuda_proto.h $(GUEST_INCLUDE)/qcuda_ioctl.h
	@mkdir -p $(@D)
	gcc $(GUEST_LIB_CFLAGS) -c -o $@ $<

# Same soname and version node as NVIDIA's (libcudart.map); the guest has
# libc, libpthread, libdl, librt, libstdc++ and libgcc_s, and this needs only
# libc.
$(GUEST_CUDART): $(GUEST_LIB_OBJS) $(GUEST_LIB_DIR)/libcudart.map
	@mkdir -p $(@D)
	gcc -shared -pthread -Wl,-soname,libcudart.so.13 -Wl,--version-script=$(GUEST_LIB_DIR)/libcudart.map \
	  -Wl,-z,defs -Wl,-z,now -Wl,--no-undefined -o $@ $(GUEST_LIB_OBJS)

guest-cuda-programs: $(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_PROGRAMS) $(addsuffix _ptds,$(GUEST_CUDA_PTDS)))

# The guest image takes both along (mkimage copies $(BUILD)/guest/lib and
# $(GUEST_BIN)) where CUDA is installed.
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
vm-image: guest-lib
endif
ifneq ($(wildcard $(NVCC)),)
vm-image: guest-cuda-programs
endif

# A static pattern rule, so that it takes precedence over guest.mk's
# $(GUEST_BIN)/% rule for C programs.
$(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_SINGLE)): $(GUEST_BIN)/%: $(CURDIR)/test/guest/%.cu \
		$(wildcard $(CURDIR)/test/guest/*.h) $(GUEST_INCLUDE)/qcuda_ioctl.h $(GUEST_INCLUDE)/qcuda_proto.h
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 -Xcompiler -Wall,-pthread -I$(GUEST_INCLUDE) \
	  -o $@ $< -lpthread

# multimodule: three TUs, each its own fat binary (no -rdc).
$(GUEST_BIN)/multimodule: $(CURDIR)/test/guest/multimodule.cu $(MULTIMODULE_PARTS) \
		$(wildcard $(CURDIR)/test/guest/*.h) $(wildcard $(CURDIR)/test/guest/parts/*.h)
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 -Xcompiler -Wall,-pthread -I$(GUEST_INCLUDE) \
	  -o $@ $< $(MULTIMODULE_PARTS) -lpthread

# multimodule_rdc: three TUs with relocatable device code, linked on the device.
$(GUEST_BIN)/multimodule_rdc: $(CURDIR)/test/guest/multimodule_rdc.cu $(MULTIMODULE_RDC_PARTS) \
		$(wildcard $(CURDIR)/test/guest/*.h) $(wildcard $(CURDIR)/test/guest/parts/*.h)
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -rdc=true -ccbin gcc -O2 -Xcompiler -Wall,-pthread -I$(GUEST_INCLUDE) \
	  -o $@ $< $(MULTIMODULE_RDC_PARTS) -lpthread

$(addprefix $(GUEST_BIN)/,$(addsuffix _ptds,$(GUEST_CUDA_PTDS))): $(GUEST_BIN)/%_ptds: $(CURDIR)/test/guest/%.cu \
		$(wildcard $(CURDIR)/test/guest/*.h)
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 --default-stream per-thread -Xcompiler -Wall,-pthread \
	  -I$(GUEST_INCLUDE) -o $@ $< -lpthread

# Benchmarks that run both natively and in a guest (test/bench/*.cu).
GUEST_CUDA_BENCHES := $(patsubst $(CURDIR)/test/bench/%.cu,%,$(wildcard $(CURDIR)/test/bench/*.cu))
guest-cuda-programs: $(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_BENCHES))
$(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_BENCHES)): $(GUEST_BIN)/%: $(CURDIR)/test/bench/%.cu
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 -o $@ $<
