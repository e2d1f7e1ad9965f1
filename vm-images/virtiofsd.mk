# virtiofsd for `qcuda vm --share` (included by vm-images/vm.mk).
#
#   make virtiofsd   put bookworm's C virtiofsd (QEMU 7.2's, from the
#                    qemu-system-common .deb, fetched with apt-get download
#                    and cached once per package version in
#                    $(CACHE)/virtiofsd-<version>/) at $(QCUDA_VIRTIOFSD);
#                    installs its shared libraries with apt when missing.
#
# Exported to every recipe (make test, make run): QCUDA_VIRTIOFSD, which the
# VM runner and `qcuda vm --virtiofsd` default to.

QCUDA_VIRTIOFSD := $(VM_BUILD)/virtiofsd
export QCUDA_VIRTIOFSD

.PHONY: virtiofsd
# Always runs the script: it checks the packages and the cache (apt-get
# --print-uris, well under a second) and rewrites the binary only when the
# package version changed.
virtiofsd:
	@CACHE='$(CACHE)' bash '$(VM_IMAGES_DIR)/get-virtiofsd.sh' '$(QCUDA_VIRTIOFSD)'

vm: virtiofsd
