# qcuda's guest CUDA runtime (libcudart.so.13). Included by the top-level
# Makefile (SHELL=bash, BUILD defined there; GUEST_INCLUDE comes from
# guest-driver/guest.mk, which must be included first). The test programs
# that use it are test/guest/guest-tests.mk's.
#
#   guest-lib            $(BUILD)/guest/lib/libcudart.so.13
#
# It needs CUDA 13's headers (CUDA_HOME, default /usr/local/cuda), and
# nothing of CUDA at run time.

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
GUEST_LIB_DIR := $(CURDIR)/guest-driver/lib
GUEST_LIB_OUT := $(BUILD)/guest/lib
GUEST_LIB_OBJ := $(BUILD)/guest/lib-obj
GUEST_CUDART := $(GUEST_LIB_OUT)/libcudart.so.13

GUEST_LIB_SRCS := $(wildcard $(GUEST_LIB_DIR)/*.c)
GUEST_LIB_OBJS := $(patsubst $(GUEST_LIB_DIR)/%.c,$(GUEST_LIB_OBJ)/%.o,$(GUEST_LIB_SRCS))
GUEST_LIB_CFLAGS := -std=gnu11 -O2 -g -fPIC -Wall -Wextra -Wno-unused-parameter -Werror \
	-fno-strict-aliasing -pthread -I$(GUEST_INCLUDE) -I$(CUDA_HOME)/include

.PHONY: guest-lib

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

# The guest image takes it along (mkimage copies $(BUILD)/guest/lib) where
# CUDA is installed.
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
vm-image: guest-lib
endif
