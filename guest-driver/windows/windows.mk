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
# nvcuda.dll is not written yet: windows.md says what there is.

WINDOWS_PKGS := gcc-mingw-w64-x86-64-posix mingw-w64-x86-64-dev binutils-mingw-w64-x86-64 wine64
MINGW_CC := x86_64-w64-mingw32-gcc-posix
WIN_OUT := $(BUILD)/windows
WIN_DIR := $(CURDIR)/guest-driver/windows
WIN_CFLAGS := -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -I$(CURDIR)/guest-driver/include -I$(CURDIR)/guest-driver/lib
WIN_PROBE_SRCS := $(WIN_DIR)/shm_probe.c $(CURDIR)/guest-driver/lib/shm_attach.c
WIN_PROBE_DEPS := $(WIN_PROBE_SRCS) $(CURDIR)/guest-driver/lib/shm_attach.h $(CURDIR)/guest-driver/lib/qc_os.h \
	$(CURDIR)/guest-driver/include/qcuda_shm.h $(CURDIR)/guest-driver/include/qcuda_proto.h

.PHONY: windows windows-deps

windows-deps:
	@[ "$$(dpkg-query -W -f='$${Status}\n' $(WINDOWS_PKGS) 2>/dev/null | grep -c 'install ok installed')" = $(words $(WINDOWS_PKGS)) ] || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(WINDOWS_PKGS); }

windows: $(WIN_OUT)/shm_probe.exe $(WIN_OUT)/shm_probe $(WIN_OUT)/shm_calls.exe $(WIN_OUT)/shm_calls

$(WIN_OUT)/shm_probe.exe: $(WIN_PROBE_DEPS) $(WIN_DIR)/os_win32.c
	@mkdir -p $(@D)
	$(MINGW_CC) $(WIN_CFLAGS) -o $@ $(WIN_PROBE_SRCS) $(WIN_DIR)/os_win32.c

$(WIN_OUT)/shm_probe: $(WIN_PROBE_DEPS) $(CURDIR)/guest-driver/lib/os_posix.c
	@mkdir -p $(@D)
	gcc $(WIN_CFLAGS) -o $@ $(WIN_PROBE_SRCS) $(CURDIR)/guest-driver/lib/os_posix.c

LIB := $(CURDIR)/guest-driver/lib
# The library's transport path over a region, as the Windows library will link it.
WIN_CALLS_SRCS := $(WIN_DIR)/shm_calls.c $(addprefix $(LIB)/,transport.c transport_user.c transport_shm.c shm_attach.c vhu_ring.c)
WIN_CALLS_DEPS := $(WIN_PROBE_DEPS) $(WIN_CALLS_SRCS) $(LIB)/vhu.h $(LIB)/transport.h $(LIB)/transport_ops.h
WIN_CALLS_OS := $(addprefix $(WIN_DIR)/,os_win32.c vhu_win32.c transport_none.c)
LINUX_CALLS_OS := $(addprefix $(LIB)/,os_posix.c vhu_mem.c vhu_conn.c vhu_ring_events.c transport_ioctl.c)

# Static: the program runs on a Windows without mingw's DLLs (winpthreads).
$(WIN_OUT)/shm_calls.exe: $(WIN_CALLS_DEPS) $(WIN_CALLS_OS)
	@mkdir -p $(@D)
	$(MINGW_CC) $(WIN_CFLAGS) -static -pthread -o $@ $(WIN_CALLS_SRCS) $(WIN_CALLS_OS)

$(WIN_OUT)/shm_calls: $(WIN_CALLS_DEPS) $(LINUX_CALLS_OS)
	@mkdir -p $(@D)
	gcc $(WIN_CFLAGS) -pthread -o $@ $(WIN_CALLS_SRCS) $(LINUX_CALLS_OS)

# Built by `make` where mingw-w64 is installed (make test installs it).
ifneq ($(shell command -v $(MINGW_CC) 2>/dev/null),)
all: windows
endif
