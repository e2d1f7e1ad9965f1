# Guest side: the qcuda.ko virtio driver, and where the guest's programs go
# (GUEST_BIN; test/guest/guest-tests.mk builds the test programs). Included
# by the top-level Makefile (SHELL=bash, BUILD, CACHE defined there).
# guest-kernel-deps and GUEST_KVER come from vm-images/vm.mk.

GUEST_DRIVER_DIR := $(CURDIR)/guest-driver
GUEST_INCLUDE := $(GUEST_DRIVER_DIR)/include
QCUDA_KO := $(BUILD)/guest-driver/kernel/qcuda.ko
GUEST_BIN := $(BUILD)/guest/bin

.PHONY: guest-module

guest-module: $(QCUDA_KO)

# The module's sources: every .c and .h of guest-driver/kernel (Kbuild lists
# the objects).
QCUDA_KO_SRCS := $(wildcard $(GUEST_DRIVER_DIR)/kernel/*.c $(GUEST_DRIVER_DIR)/kernel/*.h)

# Kbuild of this kernel (6.12) has no separate object dir for external
# modules (MO= came in 6.13): build from a copy under $(BUILD) (sources
# gone from the kernel folder are removed from it first).
# (Rebuilt when the headers of the guest kernel change too.) Built as the
# kernel's own patch flow checks a driver: W=1's extra warnings and sparse
# (C=1, its warnings errors by CF=-Wsparse-error), every warning an error
# (KCFLAGS=-Werror). Only here: the DKMS package builds with the kernel's
# own flags on whatever compiler a user has.
$(QCUDA_KO): $(QCUDA_KO_SRCS) $(GUEST_DRIVER_DIR)/kernel/Kbuild \
		$(GUEST_INCLUDE)/qcuda_proto.h $(GUEST_INCLUDE)/qcuda_ioctl.h \
		$(wildcard /usr/src/linux-headers-$(GUEST_KVER)/Module.symvers) | guest-kernel-deps
	@mkdir -p $(@D)
	rm -f $(@D)/*.c $(@D)/*.h
	cp $(QCUDA_KO_SRCS) $(GUEST_DRIVER_DIR)/kernel/Kbuild $(@D)/
	$(MAKE) -C /usr/src/linux-headers-$(GUEST_KVER) M=$(@D) QCUDA_INCLUDE=$(GUEST_INCLUDE) W=1 KCFLAGS=-Werror C=1 CF=-Wsparse-error modules
