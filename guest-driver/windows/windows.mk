# qcuda's Windows guest pieces, cross-built with mingw-w64 (issue 48).
# Included by the top-level Makefile (BUILD defined there).
#
#   windows-deps   installs mingw-w64 and Wine 8 (Debian's), as libvirt-deps
#                  installs libvirt: what `make test` needs for the Wine tests
#   windows        $(BUILD)/windows/shm_probe.exe: the shared-memory region's
#                  attach (guest-driver/lib/shm_attach.c over os_win32.c);
#                  shm_calls.exe: requests over the region through the
#                  library's transport (transport.h); and the same two for
#                  Linux, to compare; built by `make` where mingw-w64 is
#                  installed
#
#   windows-dll    $(BUILD)/windows/dll/nvcuda.dll: libcuda.so.1's sources
#                  (guest-driver/lib and guest-driver/libcuda, the Linux-only
#                  transport and OS files swapped for guest-driver/windows'),
#                  exporting the names of gen-libcuda.mjs's nvcuda.def and
#                  the runtime's (libcudart.so.13's objects), and, against it, drvbasic.exe (test/libcuda/drvbasic.c,
#                  also built for Linux) and dll_refusals.exe; and
#                  $(BUILD)/windows/dll/cudart64_13.dll: what
#                  libcudart.map exports, each name forwarded to nvcuda.dll
#                  (one session for both), with its import library libcudart.dll.a and, against that, rtbasic.exe
#                  (test/windows/rtbasic.c, also built for Linux); and
#                  drvpinned.exe and rtpinned.exe (test/windows), pinned
#                  memory through each DLL, also built for Linux; and
#                  rtdrv.exe (test/windows/rtdrv.c), both APIs in one
#                  process; cudart64_13.dll forwards to nvcuda.dll
#   windows-zip    $(BUILD)/windows/qcuda-windows-x64.zip: the two DLLs and
#                  README.txt (guest-driver/windows/README.txt), what a
#                  Windows user copies

WINDOWS_PKGS := gcc-mingw-w64-x86-64-posix mingw-w64-x86-64-dev binutils-mingw-w64-x86-64 wine64 zip unzip
MINGW_CC := x86_64-w64-mingw32-gcc-posix
WIN_OUT := $(BUILD)/windows
WIN_DIR := $(CURDIR)/guest-driver/windows
# -Werror as the Linux guest libraries; CUDA's headers as system headers:
# under mingw they redefine __cdecl, which is theirs to fix, not a warning here.
WIN_CFLAGS := -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -Werror -I$(CURDIR)/guest-driver/include -I$(CURDIR)/guest-driver/lib
WIN_PROBE_SRCS := $(WIN_DIR)/shm_probe.c $(CURDIR)/guest-driver/lib/shm_attach.c
WIN_PROBE_DEPS := $(WIN_PROBE_SRCS) $(CURDIR)/guest-driver/lib/shm_attach.h $(CURDIR)/guest-driver/lib/qc_os.h \
	$(CURDIR)/guest-driver/include/qcuda_shm.h $(CURDIR)/guest-driver/include/qcuda_proto.h

.PHONY: windows windows-deps

windows-deps:
	@[ "$$(dpkg-query -W -f='$${Status}\n' $(WINDOWS_PKGS) 2>/dev/null | grep -c 'install ok installed')" = $(words $(WINDOWS_PKGS)) ] || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(WINDOWS_PKGS); }

windows: $(WIN_OUT)/shm_probe.exe $(WIN_OUT)/shm_probe $(WIN_OUT)/shm_calls.exe $(WIN_OUT)/shm_calls

$(WIN_OUT)/shm_probe.exe: $(WIN_PROBE_DEPS) $(WIN_DIR)/os_win32.c $(WIN_DIR)/ivshmem_win32.c
	@mkdir -p $(@D)
	$(MINGW_CC) $(WIN_CFLAGS) -o $@ $(WIN_PROBE_SRCS) $(WIN_DIR)/os_win32.c $(WIN_DIR)/ivshmem_win32.c -lsetupapi

$(WIN_OUT)/shm_probe: $(WIN_PROBE_DEPS) $(CURDIR)/guest-driver/lib/os_posix.c
	@mkdir -p $(@D)
	gcc $(WIN_CFLAGS) -o $@ $(WIN_PROBE_SRCS) $(CURDIR)/guest-driver/lib/os_posix.c

LIB := $(CURDIR)/guest-driver/lib
# The library's transport path over a region, as the Windows library will link it.
WIN_CALLS_SRCS := $(WIN_DIR)/shm_calls.c $(addprefix $(LIB)/,transport.c transport_user.c transport_shm.c shm_attach.c vhu_ring.c)
WIN_CALLS_DEPS := $(WIN_PROBE_DEPS) $(WIN_CALLS_SRCS) $(LIB)/vhu.h $(LIB)/transport.h $(LIB)/transport_ops.h
WIN_CALLS_OS := $(addprefix $(WIN_DIR)/,os_win32.c ivshmem_win32.c vhu_win32.c transport_none.c)
LINUX_CALLS_OS := $(addprefix $(LIB)/,os_posix.c vhu_mem.c vhu_conn.c vhu_ring_events.c transport_ioctl.c)

# Static: the program runs on a Windows without mingw's DLLs (winpthreads).
$(WIN_OUT)/shm_calls.exe: $(WIN_CALLS_DEPS) $(WIN_CALLS_OS)
	@mkdir -p $(@D)
	$(MINGW_CC) $(WIN_CFLAGS) -static -pthread -o $@ $(WIN_CALLS_SRCS) $(WIN_CALLS_OS) -lsetupapi

$(WIN_OUT)/shm_calls: $(WIN_CALLS_DEPS) $(LINUX_CALLS_OS)
	@mkdir -p $(@D)
	gcc $(WIN_CFLAGS) -pthread -o $@ $(WIN_CALLS_SRCS) $(LINUX_CALLS_OS)

# nvcuda.dll. The generated sources (forwards, stubs, the cuGetProcAddress
# table) and the export list are libcuda.so.1's, from the same cuda.h.
WIN_DLL_OBJ := $(WIN_OUT)/dll-obj
WIN_LIB_LINUX_ONLY := vhu_mem.c vhu_conn.c vhu_ring_events.c transport_ioctl.c os_posix.c os_posix_rt.c stubs.c
WIN_LIB_SRCS := $(filter-out $(addprefix $(LIB)/,$(WIN_LIB_LINUX_ONLY)),$(wildcard $(LIB)/*.c)) \
	$(addprefix $(WIN_DIR)/,os_win32.c os_win32_rt.c ivshmem_win32.c vhu_win32.c transport_none.c)
WIN_CU_SRCS := $(wildcard $(GUEST_CU_DIR)/*.c)
WIN_CU_GEN_SRCS := $(addprefix $(GUEST_CU_GEN)/,forwards.c stubs.c procs.c)
WIN_DLL_OBJS := $(patsubst %.c,$(WIN_DLL_OBJ)/lib/%.o,$(notdir $(WIN_LIB_SRCS))) \
	$(patsubst %.c,$(WIN_DLL_OBJ)/cu/%.o,$(notdir $(WIN_CU_SRCS))) \
	$(patsubst %.c,$(WIN_DLL_OBJ)/gen/%.o,$(notdir $(WIN_CU_GEN_SRCS)))
# gnu_printf formats (%zu) through mingw's own printf, as glibc's.
WIN_DLL_CFLAGS := $(WIN_CFLAGS) -fno-strict-aliasing -pthread -D__USE_MINGW_ANSI_STDIO=1 -isystem $(CUDA_HOME)/include \
	-I$(GUEST_CU_DIR) -I$(GUEST_CU_GEN)
WIN_DLL_HDRS := $(wildcard $(LIB)/*.h) $(wildcard $(GUEST_CU_DIR)/*.h) $(GUEST_INCLUDE)/qcuda_proto.h \
	$(GUEST_CU_GEN)/cu_errnames.h $(GUEST_CU_GEN)/cu_twins.h

.PHONY: windows-dll
windows-dll: $(WIN_OUT)/dll/nvcuda.dll
# make windows (which make test runs) builds the DLL and its test programs too.
windows: windows-dll

# The compile rule of each source folder: $(2)'s sources to objects under $(1).
define WIN_DLL_COMPILE
$$(WIN_DLL_OBJ)/$(1)/%.o: $(2)/%.c $$(WIN_DLL_HDRS)
	@mkdir -p $$(@D)
	$$(MINGW_CC) $$(WIN_DLL_CFLAGS) -c -o $$@ $$<
endef
$(eval $(call WIN_DLL_COMPILE,lib,$(LIB)))
$(eval $(call WIN_DLL_COMPILE,lib,$(WIN_DIR)))
$(eval $(call WIN_DLL_COMPILE,cu,$(GUEST_CU_DIR)))
$(eval $(call WIN_DLL_COMPILE,gen,$(GUEST_CU_GEN)))

# Static libgcc and winpthreads: the DLL alone is what a user copies. It
# holds the runtime too (libcudart.so.13's stubs.o with the rest of its
# objects) and exports it beside the driver API: cudart64_13.dll forwards
# there, so a process that loads both has one session (below).
$(WIN_OUT)/dll/nvcuda.dll: $(WIN_DLL_OBJS) $(WIN_DLL_OBJ)/lib/stubs.o $(WIN_DLL_OBJ)/nvcuda.def
	@mkdir -p $(@D)
	$(MINGW_CC) -shared -static -pthread -o $@ $(WIN_DLL_OBJS) $(WIN_DLL_OBJ)/lib/stubs.o $(WIN_DLL_OBJ)/nvcuda.def \
	  -lbcrypt -lsetupapi
# gen-libcuda.mjs's list, then the runtime's names it does not hold already.
$(WIN_DLL_OBJ)/nvcuda.def: $(GUEST_CU_GEN)/nvcuda.def $(WIN_DLL_OBJ)/cudart-exports.txt
	{ cat $(GUEST_CU_GEN)/nvcuda.def; grep -vxFf <(grep '^	' $(GUEST_CU_GEN)/nvcuda.def) $(WIN_DLL_OBJ)/cudart-exports.txt; } > $@.tmp
	mv $@.tmp $@

# drvbasic (test/libcuda): one driver-API source, over nvcuda.dll and over
# libcuda.so.1, to compare (test/windows/dll-wine.test.ts); linked against
# the DLL itself, as a program is against NVIDIA's import library.
WIN_DRV_SRC := $(CURDIR)/test/libcuda/drvbasic.c
windows-dll: $(WIN_OUT)/dll/drvbasic.exe $(WIN_OUT)/drvbasic $(WIN_OUT)/drvapi.cubin
$(WIN_OUT)/dll/drvbasic.exe: $(WIN_DRV_SRC) $(CURDIR)/test/libcuda/check.h $(CURDIR)/test/libcuda/check_core.h $(WIN_OUT)/dll/nvcuda.dll
	$(MINGW_CC) -std=gnu11 -O2 -Wall -Wextra -Werror -D__USE_MINGW_ANSI_STDIO=1 -isystem $(CUDA_HOME)/include -o $@ $< $(WIN_OUT)/dll/nvcuda.dll
# What nvcuda.dll refuses on Windows (docs/windows.md), for the same test.
windows-dll: $(WIN_OUT)/dll/dll_refusals.exe
$(WIN_OUT)/dll/dll_refusals.exe: $(WIN_DIR)/dll_refusals.c $(WIN_OUT)/dll/nvcuda.dll
	$(MINGW_CC) -std=gnu11 -O2 -Wall -Wextra -Werror -isystem $(CUDA_HOME)/include -o $@ $< $(WIN_OUT)/dll/nvcuda.dll
$(WIN_OUT)/drvbasic: $(WIN_DRV_SRC) $(CURDIR)/test/libcuda/check.h $(CURDIR)/test/libcuda/check_core.h $(GUEST_LIBCUDA)
	gcc -std=gnu11 -O2 -Wall -Wextra -I$(CUDA_HOME)/include -o $@ $< -L$(GUEST_LIB_OUT) -l:libcuda.so.1
$(WIN_OUT)/drvapi.cubin: $(CURDIR)/test/libcuda/drvapi_kernels.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<

# The runtime's exports: the names libcudart.map makes global (its
# patterns, read from it), taken from what libcudart.so.13's objects (the
# runtime layer's and its stubs.o) define: no list kept by hand.
WIN_CUDART_OBJS := $(patsubst %.c,$(WIN_DLL_OBJ)/lib/%.o,$(notdir $(WIN_LIB_SRCS))) $(WIN_DLL_OBJ)/lib/stubs.o
MINGW_NM := x86_64-w64-mingw32-nm
$(WIN_DLL_OBJ)/cudart-exports.txt: $(WIN_CUDART_OBJS) $(LIB)/libcudart.map
	re=$$(sed -n '/global:/,/local:/s/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_*]*\);.*/\1/p' $(LIB)/libcudart.map | \
	  sed 's/\*/.*/g; s/.*/^&$$/' | paste -sd'|') && \
	$(MINGW_NM) -g --defined-only $(WIN_CUDART_OBJS) | \
	  awk -v re="$$re" 'NF == 3 && $$3 ~ re { print "\t" $$3 ($$2 ~ /^[DBR]$$/ ? " DATA" : "") }' | sort -u > $@.tmp
	@[ "$$(grep -c '^	' $@.tmp)" -gt 400 ] || { echo "$@: too few exports"; exit 1; }
	mv $@.tmp $@

# cudart64_13.dll: no code, each of the runtime's names forwarded to
# nvcuda.dll (PE export forwarders, which Windows' loader follows), so the
# runtime a program loads and the driver API it or NVIDIA's libraries call
# are one library with one session; the two DLLs go together. The import
# library is what a mingw program links against (rtbasic.exe below); a
# program built with NVIDIA's toolkit links NVIDIA's cudart.lib, which names
# the same DLL.
windows-dll: $(WIN_OUT)/dll/cudart64_13.dll
$(WIN_DLL_OBJ)/cudart64_13.def: $(WIN_DLL_OBJ)/cudart-exports.txt
	{ echo 'LIBRARY cudart64_13.dll'; echo 'EXPORTS'; awk '{ print "\t" $$1 " = nvcuda." $$1 ($$2 ? " " $$2 : "") }' $<; } > $@.tmp
	mv $@.tmp $@
$(WIN_OUT)/dll/cudart64_13.dll $(WIN_OUT)/dll/libcudart.dll.a &: $(WIN_DLL_OBJ)/cudart64_13.def $(WIN_OUT)/dll/nvcuda.dll
	@mkdir -p $(@D)
	$(MINGW_CC) -shared -nostdlib -Wl,-e,0 -o $(WIN_OUT)/dll/cudart64_13.dll $(WIN_DLL_OBJ)/cudart64_13.def \
	  -Wl,--out-implib,$(WIN_OUT)/dll/libcudart.dll.a

# rtbasic (test/windows/rtbasic.c): the runtime API and a kernel registered
# from a fat binary as nvcc's generated code registers it, over
# cudart64_13.dll (through its import library) and over libcudart.so.13, to
# compare (test/windows/cudart-wine.test.ts). The fat binary is nvcc's, as
# an array of 64-bit words, as nvcc embeds it.
WIN_RT_SRC := $(CURDIR)/test/windows/rtbasic.c
windows-dll: $(WIN_OUT)/dll/rtbasic.exe $(WIN_OUT)/rtbasic
$(WIN_OUT)/rtbasic_fatbin.h: $(CURDIR)/test/windows/rtbasic_kernels.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -arch=sm_90 -o $(WIN_OUT)/rtbasic.fatbin $<
	{ echo '/* nvcc -fatbin of rtbasic_kernels.cu: do not edit. */'; \
	  echo 'static const unsigned long long rtbasic_fatbin[] = {'; \
	  od -An -v -tx8 $(WIN_OUT)/rtbasic.fatbin | sed 's/\([0-9a-f]\{16\}\)/0x\1ull,/g'; echo '};'; } > $@.tmp && mv $@.tmp $@
$(WIN_OUT)/dll/rtbasic.exe: $(WIN_RT_SRC) $(CURDIR)/test/libcuda/check_core.h $(WIN_OUT)/rtbasic_fatbin.h $(WIN_OUT)/dll/libcudart.dll.a
	$(MINGW_CC) -std=gnu11 -O2 -Wall -Wextra -Werror -D__USE_MINGW_ANSI_STDIO=1 -isystem $(CUDA_HOME)/include -I$(WIN_OUT) \
	  -o $@ $< -L$(WIN_OUT)/dll -lcudart
$(WIN_OUT)/rtbasic: $(WIN_RT_SRC) $(CURDIR)/test/libcuda/check_core.h $(WIN_OUT)/rtbasic_fatbin.h $(GUEST_CUDART)
	gcc -std=gnu11 -O2 -Wall -Wextra -Werror -isystem $(CUDA_HOME)/include -I$(WIN_OUT) -o $@ $< \
	  -L$(GUEST_LIB_OUT) -l:libcudart.so.13

# drvpinned and rtpinned (test/windows): pinned host memory through each
# DLL and through its Linux library, to compare
# (test/windows/pinned-wine.test.ts).
WIN_PIN_DIR := $(CURDIR)/test/windows
WIN_PIN_CFLAGS := -std=gnu11 -O2 -Wall -Wextra -Werror -isystem $(CUDA_HOME)/include
windows-dll: $(WIN_OUT)/dll/drvpinned.exe $(WIN_OUT)/drvpinned $(WIN_OUT)/dll/rtpinned.exe $(WIN_OUT)/rtpinned
$(WIN_OUT)/dll/drvpinned.exe: $(WIN_PIN_DIR)/drvpinned.c $(WIN_PIN_DIR)/pinned.h $(WIN_OUT)/dll/nvcuda.dll
	$(MINGW_CC) $(WIN_PIN_CFLAGS) -D__USE_MINGW_ANSI_STDIO=1 -o $@ $< $(WIN_OUT)/dll/nvcuda.dll
$(WIN_OUT)/drvpinned: $(WIN_PIN_DIR)/drvpinned.c $(WIN_PIN_DIR)/pinned.h $(GUEST_LIBCUDA)
	gcc $(WIN_PIN_CFLAGS) -o $@ $< -L$(GUEST_LIB_OUT) -l:libcuda.so.1
$(WIN_OUT)/dll/rtpinned.exe: $(WIN_PIN_DIR)/rtpinned.c $(WIN_PIN_DIR)/pinned.h $(WIN_OUT)/dll/libcudart.dll.a
	$(MINGW_CC) $(WIN_PIN_CFLAGS) -D__USE_MINGW_ANSI_STDIO=1 -o $@ $< -L$(WIN_OUT)/dll -lcudart
$(WIN_OUT)/rtpinned: $(WIN_PIN_DIR)/rtpinned.c $(WIN_PIN_DIR)/pinned.h $(GUEST_CUDART)
	gcc $(WIN_PIN_CFLAGS) -o $@ $< -L$(GUEST_LIB_OUT) -l:libcudart.so.13

# rtdrv (test/windows/rtdrv.c): the runtime and the driver API in one
# process, each using what the other allocated: over cudart64_13.dll and
# nvcuda.dll, and on Linux over NVIDIA's runtime and qcuda's libcuda.so.1
# (one session there too), to compare (test/windows/rtdrv-wine.test.ts).
windows-dll: $(WIN_OUT)/dll/rtdrv.exe $(WIN_OUT)/rtdrv
$(WIN_OUT)/dll/rtdrv.exe: $(WIN_PIN_DIR)/rtdrv.c $(WIN_OUT)/dll/libcudart.dll.a $(WIN_OUT)/dll/nvcuda.dll
	$(MINGW_CC) $(WIN_PIN_CFLAGS) -D__USE_MINGW_ANSI_STDIO=1 -o $@ $< -L$(WIN_OUT)/dll -lcudart $(WIN_OUT)/dll/nvcuda.dll
$(WIN_OUT)/rtdrv: $(WIN_PIN_DIR)/rtdrv.c $(GUEST_LIBCUDA)
	gcc $(WIN_PIN_CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64 -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64 -L$(GUEST_LIB_OUT) -l:libcuda.so.1

# What a Windows user copies: the two DLLs and README.txt (CRLF, for
# Notepad) in one folder of a zip (zip, which windows-deps installs). make
# test builds it for test/windows/zip-wine.test.ts.
WIN_ZIP := $(WIN_OUT)/qcuda-windows-x64.zip
.PHONY: windows-zip
windows-zip: $(WIN_ZIP)
$(WIN_ZIP): $(WIN_OUT)/dll/nvcuda.dll $(WIN_OUT)/dll/cudart64_13.dll $(WIN_DIR)/README.txt
	rm -rf $(WIN_OUT)/zip $@ && mkdir -p $(WIN_OUT)/zip/qcuda-windows-x64
	cp $(WIN_OUT)/dll/nvcuda.dll $(WIN_OUT)/dll/cudart64_13.dll $(WIN_OUT)/zip/qcuda-windows-x64/
	sed 's/$$/\r/' $(WIN_DIR)/README.txt > $(WIN_OUT)/zip/qcuda-windows-x64/README.txt
	cd $(WIN_OUT)/zip && zip -q -X -r $@.tmp qcuda-windows-x64 && mv $@.tmp $@

# Built by `make` where mingw-w64 is installed (make test installs it).
ifneq ($(shell command -v $(MINGW_CC) 2>/dev/null),)
all: windows
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
all: windows-dll
endif
endif
