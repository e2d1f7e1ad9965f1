# The qcuda disk image: Debian 12 from packages only, the qcuda packages
# installed with apt (DKMS builds qcuda.ko in it), booted with systemd by
# `qcuda vm --disk-image`. See vm-images/disk/README.md.
#
#   guest-disk   $(GUEST_DISK), built once per set of inputs (mkdisk.sh and the
#                guest files beside it, the .debs' content) and cached in
#                $(CACHE)/guest-disk-<key>/; mkdisk.sh installs mmdebstrap
#                with apt when missing.

GUEST_DISK_DIR := $(VM_IMAGES_DIR)/disk
GUEST_DISK := $(BUILD)/guest-disk/qcuda-debian12.img
export GUEST_DISK

.PHONY: guest-disk
# Always runs the script (guest-debs rebuilds the .debs each time): it hashes
# the inputs in about a second and copies only a different image.
guest-disk: guest-debs
	CACHE='$(CACHE)' $(GUEST_DISK_DIR)/mkdisk.sh '$(GUEST_DISK)' \
	  $(GUEST_DEB_DIR)/qcuda-dkms_$(QCUDA_VERSION)_all.deb $(GUEST_DEB_DIR)/qcuda-libs_$(QCUDA_VERSION)_amd64.deb
