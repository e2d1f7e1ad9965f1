# qcuda's guest NVML (libnvidia-ml.so.1): the queries NCCL makes, answered
# from qcuda's libcuda.so.1 (nvml.c). Included by the top-level Makefile
# after guest-driver/libcuda/libcuda.mk. The guest image takes it along with
# the other libraries of $(GUEST_LIB_OUT) (mkimage.sh); `qcuda run` does not
# put it on the library path: there the host's own NVML sees the same GPUs.
#
#   guest-nvml   $(GUEST_LIB_OUT)/libnvidia-ml.so.1

GUEST_NVML_DIR := $(CURDIR)/guest-driver/nvml
GUEST_NVML := $(GUEST_LIB_OUT)/libnvidia-ml.so.1

.PHONY: guest-nvml
guest-nvml: $(GUEST_NVML)

# Only the nvml* names are exported (-fvisibility=hidden, NVML_API); it needs
# libcuda.so.1 by its soname, qcuda's in a guest.
$(GUEST_NVML): $(GUEST_NVML_DIR)/nvml.c $(GUEST_NVML_DIR)/nvml_abi.h $(GUEST_LIBCUDA)
	@mkdir -p $(@D)
	gcc -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter -Werror -I$(CUDA_HOME)/include \
	  -shared -pthread -Wl,-soname,libnvidia-ml.so.1 -Wl,-z,defs -Wl,-z,now \
	  -o $@ $< -L$(GUEST_LIB_OUT) -l:libcuda.so.1

ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
vm-image: guest-nvml
endif
