# Guest packages (.deb): qcuda-dkms (the driver's source, built by DKMS on the
# guest for each kernel, loaded at boot, /dev/qcuda* for the qcuda group) and
# qcuda-libs (libcuda.so.1, libcudart.so.13 and libnvidia-ml.so.1 in the multiarch library
# directory; conflicting with NVIDIA's packages of them). Included by the top-level Makefile.
#
#   guest-debs   $(BUILD)/deb/*.deb, checked by lintian (errors and warnings fail)
#
# The version is package.json's; the packaging is packaging/debian/. The
# source tree is staged under $(BUILD)/deb (nothing of it is compiled there).

GUEST_DEB_DIR := $(BUILD)/deb
QCUDA_VERSION := $(shell node -p "require('./package.json').version" 2>/dev/null)
GUEST_DEB_PKGS := debhelper dh-dkms lintian
GUEST_DEB_SRC := $(GUEST_DEB_DIR)/qcuda-guest-$(QCUDA_VERSION)

.PHONY: guest-debs guest-deb-deps

guest-deb-deps:
	@[ "$$(dpkg-query -W -f='$${Status}\n' $(GUEST_DEB_PKGS) 2>/dev/null | grep -c 'install ok installed')" = $(words $(GUEST_DEB_PKGS)) ] || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(GUEST_DEB_PKGS); }

guest-debs: guest-deb-deps guest-lib guest-libcuda guest-nvml
	rm -rf $(GUEST_DEB_DIR)
	mkdir -p $(GUEST_DEB_SRC)/src/kernel $(GUEST_DEB_SRC)/src/include $(GUEST_DEB_SRC)/src/lib
	cp -r packaging/debian $(GUEST_DEB_SRC)/
	cp $(QCUDA_KO_SRCS) $(GUEST_DRIVER_DIR)/kernel/Kbuild $(GUEST_DEB_SRC)/src/kernel/
	cp $(GUEST_INCLUDE)/qcuda_proto.h $(GUEST_INCLUDE)/qcuda_ioctl.h $(GUEST_DEB_SRC)/src/include/
	cp $(BUILD)/guest/lib/libcuda.so.1 $(BUILD)/guest/lib/libcudart.so.13 $(GUEST_NVML) $(GUEST_DEB_SRC)/src/lib/
	{ echo "qcuda-guest ($(QCUDA_VERSION)) unstable; urgency=medium"; echo; \
	  echo "  * Built from $$(git rev-parse --short HEAD 2>/dev/null || echo a source tree)."; echo; \
	  echo " -- qcuda maintainers <maintainers@qcuda.invalid>  $$(date -R -d @$$(git log -1 --format=%ct 2>/dev/null || date +%s))"; \
	} > $(GUEST_DEB_SRC)/debian/changelog
	cd $(GUEST_DEB_SRC) && dpkg-buildpackage -us -uc -b --no-sign >/dev/null
	lintian --fail-on error,warning $(GUEST_DEB_DIR)/*.changes
	@ls -l $(GUEST_DEB_DIR)/*.deb
