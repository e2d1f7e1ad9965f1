# The guest test programs (test/guest, test/bench, test/libcuda). Included by
# the top-level Makefile after guest-driver/guest.mk (GUEST_BIN,
# GUEST_INCLUDE), guest-driver/lib/lib.mk (CUDA_HOME, NVCC, GUEST_LIB_OUT)
# and guest-driver/libcuda/libcuda.mk (GUEST_LIBCUDA), which build only the
# driver and the libraries.
#
#   guest-programs       $(GUEST_BIN)/<name> for the C programs below (gcc)
#   guest-cuda-programs  $(GUEST_BIN)/<name> for each test/guest/<name>.cu
#                        (nvcc -cudart=shared -arch=sm_90; linked against
#                        NVIDIA's libcudart.so.13, they load qcuda's in the
#                        guest), and the benchmarks of test/bench
#   guest-cuda-static    $(GUEST_BIN)/<name>_static for the programs in
#                        GUEST_CUDA_STATIC (nvcc defaults, -arch=sm_90), and
#                        the driver API programs of test/libcuda
#
# The CUDA programs need CUDA 13's headers and nvcc; the image takes them
# along where they are installed.

GUEST_TESTS_DIR := $(CURDIR)/test/guest

.PHONY: guest-programs guest-cuda-programs guest-cuda-static

# ------------------------------------------------------------ C programs

# C programs built from test/guest/<name>.c into $(GUEST_BIN)/<name>.
GUEST_C_PROGRAMS := nop_test call_test blkbench ringhog
# call_test's parts (test/guest/parts), beside call_test.c.
CALL_TEST_PARTS := $(GUEST_TESTS_DIR)/parts/call_test_driver.c $(GUEST_TESTS_DIR)/parts/call_test_backend.c

guest-programs: $(addprefix $(GUEST_BIN)/,$(GUEST_C_PROGRAMS))

$(GUEST_BIN)/%: $(GUEST_TESTS_DIR)/%.c $(GUEST_INCLUDE)/qcuda_ioctl.h $(GUEST_INCLUDE)/qcuda_proto.h \
		| guest-kernel-deps
	@mkdir -p $(@D)
	gcc -O2 -g -Wall -Wextra -pthread -I$(GUEST_INCLUDE) -o $@ $<

$(GUEST_BIN)/call_test: $(GUEST_TESTS_DIR)/call_test.c $(CALL_TEST_PARTS) $(GUEST_TESTS_DIR)/parts/call_test.h \
		$(GUEST_INCLUDE)/qcuda_ioctl.h $(GUEST_INCLUDE)/qcuda_proto.h | guest-kernel-deps
	@mkdir -p $(@D)
	gcc -O2 -g -Wall -Wextra -pthread -I$(GUEST_INCLUDE) -o $@ $< $(CALL_TEST_PARTS)

# ----------------------------------------- CUDA programs (qcuda's libcudart)

GUEST_CUDA_PROGRAMS := $(patsubst $(GUEST_TESTS_DIR)/%.cu,%,$(wildcard $(GUEST_TESTS_DIR)/*.cu))
# Also built with --default-stream per-thread (the _ptds/_ptsz entry points).
GUEST_CUDA_PTDS := memcpy stream memadvise
# Programs of several translation units: test/guest/<name>.cu plus their
# parts in test/guest/parts/ (which the wildcard above does not see).
GUEST_CUDA_MULTI := multimodule multimodule_rdc
GUEST_CUDA_SINGLE := $(filter-out $(GUEST_CUDA_MULTI),$(GUEST_CUDA_PROGRAMS))
MULTIMODULE_PARTS := $(GUEST_TESTS_DIR)/parts/multimodule_a.cu $(GUEST_TESTS_DIR)/parts/multimodule_b.cu
MULTIMODULE_RDC_PARTS := $(GUEST_TESTS_DIR)/parts/multimodule_rdc_a.cu \
	$(GUEST_TESTS_DIR)/parts/multimodule_rdc_b.cu

guest-cuda-programs: $(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_PROGRAMS) $(addsuffix _ptds,$(GUEST_CUDA_PTDS)))

# The guest image takes them along (mkimage copies $(GUEST_BIN)) where nvcc
# is installed.
ifneq ($(wildcard $(NVCC)),)
vm-image: guest-cuda-programs
endif

# A static pattern rule, so that it takes precedence over the $(GUEST_BIN)/%
# rule for C programs above.
$(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_SINGLE)): $(GUEST_BIN)/%: $(GUEST_TESTS_DIR)/%.cu \
		$(wildcard $(GUEST_TESTS_DIR)/*.h) $(GUEST_INCLUDE)/qcuda_ioctl.h $(GUEST_INCLUDE)/qcuda_proto.h
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 -Xcompiler -Wall,-pthread -I$(GUEST_INCLUDE) \
	  -o $@ $< -lpthread

# multimodule: three TUs, each its own fat binary (no -rdc).
$(GUEST_BIN)/multimodule: $(GUEST_TESTS_DIR)/multimodule.cu $(MULTIMODULE_PARTS) \
		$(wildcard $(GUEST_TESTS_DIR)/*.h) $(wildcard $(GUEST_TESTS_DIR)/parts/*.h)
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 -Xcompiler -Wall,-pthread -I$(GUEST_INCLUDE) \
	  -o $@ $< $(MULTIMODULE_PARTS) -lpthread

# multimodule_rdc: three TUs with relocatable device code, linked on the device.
$(GUEST_BIN)/multimodule_rdc: $(GUEST_TESTS_DIR)/multimodule_rdc.cu $(MULTIMODULE_RDC_PARTS) \
		$(wildcard $(GUEST_TESTS_DIR)/*.h) $(wildcard $(GUEST_TESTS_DIR)/parts/*.h)
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -rdc=true -ccbin gcc -O2 -Xcompiler -Wall,-pthread -I$(GUEST_INCLUDE) \
	  -o $@ $< $(MULTIMODULE_RDC_PARTS) -lpthread

$(addprefix $(GUEST_BIN)/,$(addsuffix _ptds,$(GUEST_CUDA_PTDS))): $(GUEST_BIN)/%_ptds: $(GUEST_TESTS_DIR)/%.cu \
		$(wildcard $(GUEST_TESTS_DIR)/*.h)
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 --default-stream per-thread -Xcompiler -Wall,-pthread \
	  -I$(GUEST_INCLUDE) -o $@ $< -lpthread

# Benchmarks that run both natively and in a guest (test/bench/*.cu).
GUEST_CUDA_BENCHES := $(patsubst $(CURDIR)/test/bench/%.cu,%,$(wildcard $(CURDIR)/test/bench/*.cu))
guest-cuda-programs: $(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_BENCHES))
$(addprefix $(GUEST_BIN)/,$(GUEST_CUDA_BENCHES)): $(GUEST_BIN)/%: $(CURDIR)/test/bench/%.cu
	@mkdir -p $(@D)
	$(NVCC) -cudart=shared -arch=sm_90 -ccbin gcc -O2 -o $@ $<

# ------------------------------------------- default-built and driver API

# Guest programs built as users build them: nvcc's defaults (static cudart,
# which loads libcuda.so.1). Every single-file program but those that test
# qcuda's own runtime library, drive the guest driver for test/vm or the
# backend's worker watch (stuck) (their _static twin would test nothing
# more): the two builds must print the same.
GUEST_CUDA_QCUDA_ONLY := hostile mapreset memlock sessionend ringfill killcopy stuck
GUEST_CUDA_STATIC := $(filter-out $(GUEST_CUDA_QCUDA_ONLY),$(GUEST_CUDA_SINGLE))
guest-cuda-static: $(addprefix $(GUEST_BIN)/,$(addsuffix _static,$(GUEST_CUDA_STATIC)))
$(addprefix $(GUEST_BIN)/,$(addsuffix _static,$(GUEST_CUDA_STATIC))): $(GUEST_BIN)/%_static: \
		$(GUEST_TESTS_DIR)/%.cu $(wildcard $(GUEST_TESTS_DIR)/*.h)
	@mkdir -p $(@D)
	$(NVCC) -arch=sm_90 -ccbin gcc -O2 -Xcompiler -Wall,-pthread -I$(GUEST_INCLUDE) -o $@ $< -lpthread

ifneq ($(wildcard $(NVCC)),)
vm-image: guest-cuda-static
endif

# A program written against the driver API (linked with -lcuda: here qcuda's
# libcuda.so.1, by its soname; natively NVIDIA's).
GUEST_CU_PROGRAMS := drvapi cublas_sgemm forkquota vmm ipcpair poolipc shmreg nvmlcheck multidevctx hopper limitcache
guest-cuda-static: $(addprefix $(GUEST_BIN)/,$(GUEST_CU_PROGRAMS))
guest-cuda-static: $(GUEST_BIN)/drvapi.cubin
$(GUEST_BIN)/drvapi.cubin: $(CURDIR)/test/libcuda/drvapi_kernels.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<
$(addprefix $(GUEST_BIN)/,$(GUEST_CU_PROGRAMS)): $(GUEST_BIN)/%: $(CURDIR)/test/libcuda/%.c $(CURDIR)/test/libcuda/check.h $(CURDIR)/test/libcuda/check_core.h $(GUEST_LIBCUDA)
	@mkdir -p $(@D)
	gcc -std=gnu11 -O2 -Wall -Wextra -I$(CUDA_HOME)/include -o $@ $< -L$(GUEST_LIB_OUT) -l:libcuda.so.1 -ldl

# gpa_dump (test/libcuda): what a libcuda's cuGetProcAddress answers; the
# GPU run compares NVIDIA's and this one's (a host tool, carried with the
# guest programs).
guest-cuda-static: $(GUEST_BIN)/gpa_dump
$(GUEST_BIN)/gpa_dump: $(CURDIR)/test/libcuda/gpa_dump.c
	@mkdir -p $(@D)
	gcc -std=gnu11 -O2 -Wall -Wextra -o $@ $< -ldl
