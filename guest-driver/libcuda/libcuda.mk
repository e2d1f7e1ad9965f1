# qcuda's guest CUDA driver API (libcuda.so.1). Included by the top-level
# Makefile after guest-driver/lib/lib.mk (whose objects it links: the driver
# API runs on the runtime library's session). The test programs that use it
# are test/guest/guest-tests.mk's.
#
#   guest-libcuda           $(BUILD)/guest/lib/libcuda.so.1
#
# gen-libcuda.mjs derives the exports, stubs and cuGetProcAddress table, and
# the forwards of forwards.def (with cu_twins.h), from CUDA's headers at build
# time (README.md); nothing generated is committed.

GUEST_CU_DIR := $(CURDIR)/guest-driver/libcuda
GUEST_CU_OBJ := $(BUILD)/guest/libcuda-obj
GUEST_CU_GEN := $(BUILD)/guest/libcuda-gen
GUEST_LIBCUDA := $(GUEST_LIB_OUT)/libcuda.so.1
GUEST_CU_OBJS := $(patsubst $(GUEST_CU_DIR)/%.c,$(GUEST_CU_OBJ)/%.o,$(wildcard $(GUEST_CU_DIR)/*.c)) \
	$(GUEST_CU_GEN)/forwards.o
GUEST_CU_HDRS := $(addprefix $(CUDA_HOME)/include/,cuda.h cudaProfiler.h cudaTypedefs.h cudaProfilerTypedefs.h)
# The runtime library's objects but its stubs (cuda* names, local here anyway).
GUEST_CU_RT_OBJS := $(filter-out %/stubs.o,$(GUEST_LIB_OBJS))

.PHONY: guest-libcuda
guest-libcuda: $(GUEST_LIBCUDA)

# CUresult names, from cuda.h's enum.
$(GUEST_CU_GEN)/cu_errnames.h: $(CUDA_HOME)/include/cuda.h
	@mkdir -p $(@D)
	{ echo '/* Generated from cuda.h: do not edit. */'; \
	  echo 'static const struct { int code; const char *name; } cu_errnames[] = {'; \
	  awk '/^typedef enum cudaError_enum/,/} CUresult;/' $< | grep -o 'CUDA_[A-Z0-9_]* *= *[0-9]*' | \
	    sed 's/\(CUDA_[A-Z0-9_]*\) *= *\([0-9]*\)/\t{ \2, "\1" },/'; \
	  echo '};'; } > $@.tmp && mv $@.tmp $@

# The entry points that are one runtime-layer call, and the prototypes of the
# _ptsz/_ptds ones (cu.h includes them), before anything is compiled.
$(GUEST_CU_GEN)/forwards.c $(GUEST_CU_GEN)/cu_twins.h &: \
		$(GUEST_CU_DIR)/gen-libcuda.mjs $(GUEST_CU_DIR)/forwards.def $(GUEST_CU_HDRS)
	node $(GUEST_CU_DIR)/gen-libcuda.mjs --cuda=$(CUDA_HOME) --out=$(GUEST_CU_GEN) --forwards=$(GUEST_CU_DIR)/forwards.def

$(GUEST_CU_OBJ)/%.o: $(GUEST_CU_DIR)/%.c $(wildcard $(GUEST_CU_DIR)/*.h) $(wildcard $(GUEST_LIB_DIR)/*.h) \
		$(GUEST_CU_GEN)/cu_errnames.h $(GUEST_CU_GEN)/cu_twins.h $(GUEST_INCLUDE)/qcuda_proto.h
	@mkdir -p $(@D)
	gcc $(GUEST_LIB_CFLAGS) -I$(GUEST_CU_GEN) -c -o $@ $<

# What the hand-written objects and the forwards define (those get no stub).
$(GUEST_CU_GEN)/defined.txt: $(GUEST_CU_OBJS)
	@mkdir -p $(@D)
	nm -g --defined-only $^ | awk '$$2=="T"{print $$3}' | sort -u > $@

$(GUEST_CU_GEN)/exports.txt $(GUEST_CU_GEN)/libcuda.map $(GUEST_CU_GEN)/nvcuda.def $(GUEST_CU_GEN)/stubs.c $(GUEST_CU_GEN)/procs.c &: \
		$(GUEST_CU_DIR)/gen-libcuda.mjs $(GUEST_CU_DIR)/gpa-requests.txt $(GUEST_CU_HDRS) $(GUEST_CU_GEN)/defined.txt
	node $(GUEST_CU_DIR)/gen-libcuda.mjs --cuda=$(CUDA_HOME) --out=$(GUEST_CU_GEN) \
	  --defined=$(GUEST_CU_GEN)/defined.txt --requests=$(GUEST_CU_DIR)/gpa-requests.txt

$(GUEST_CU_GEN)/%.o: $(GUEST_CU_GEN)/%.c $(GUEST_CU_DIR)/cu.h $(GUEST_CU_GEN)/cu_twins.h
	gcc $(GUEST_LIB_CFLAGS) -I$(GUEST_CU_DIR) -I$(GUEST_CU_GEN) -c -o $@ $<

# NVIDIA's soname; no version nodes (as NVIDIA's); only the cu* names of
# cuda.h are exported (the runtime layer's cuda* and qc_* stay local).
$(GUEST_LIBCUDA): $(GUEST_CU_OBJS) $(GUEST_CU_GEN)/stubs.o $(GUEST_CU_GEN)/procs.o $(GUEST_CU_RT_OBJS) \
		$(GUEST_CU_GEN)/libcuda.map
	@mkdir -p $(@D)
	gcc -shared -pthread -Wl,-soname,libcuda.so.1 -Wl,--version-script=$(GUEST_CU_GEN)/libcuda.map \
	  -Wl,-z,defs -Wl,-z,now -Wl,--no-undefined -o $@ \
	  $(GUEST_CU_OBJS) $(GUEST_CU_GEN)/stubs.o $(GUEST_CU_GEN)/procs.o $(GUEST_CU_RT_OBJS)

ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
vm-image: guest-libcuda
endif
