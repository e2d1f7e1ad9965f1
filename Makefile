# qcuda: top-level build. On a fresh Debian bookworm machine with Node 20,
# `make test` installs what it needs (apt, npm) and runs every test, and
# `make run` boots a guest with the virtual CUDA device and runs programs in it.
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/qcuda
BUILD := $(CURDIR)/build
# node-gyp builds against the headers of the node that runs it (no download).
NODEDIR := $(shell d=$$(dirname $$(dirname $$(command -v node))); [ -f $$d/include/node/node_api.h ] && echo $$d)
ADDON := addon/build/Release/vhost_user_native.node

.PHONY: all node test test-unit check run bench clean gen check-gen
all: node

node: node_modules/.installed $(ADDON) dist/.built

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

$(ADDON): addon/binding.gyp $(wildcard addon/src/* backend/src/vhost-user/native/*) node_modules/.installed
	cd addon && ../node_modules/.bin/node-gyp rebuild $(if $(NODEDIR),--nodedir=$(NODEDIR))

dist/.built: tsconfig.json $(shell find backend/src test -name '*.ts') node_modules/.installed
	rm -rf dist && node_modules/.bin/tsc -p . && touch $@

# The committed generated files (backend/src/tools/generated.ts lists them):
# gen rewrites the stale ones; check-gen names them and fails.
gen: node
	node dist/backend/src/tools/gen.js
check-gen: node
	node dist/backend/src/tools/gen.js --check

# Everything the VM tests need: patched QEMU (cached), guest kernel, driver, image.
vm: qemu vm-image

# Lint first (lint/lint.mk): a style slip fails in seconds, not after the
# tests. Every area of test/, one after the other, each one's time printed
# at the end (test/areas.sh). Under c8: the backend's line coverage (the
# processes of the areas but the VM ones, whose backends drop root and
# cannot write it, and the Wine one) may not fall below COVERAGE_FLOOR,
# which is raised as it grows, never lowered.
COVERAGE_FLOOR := 90
test: lint node vm guest-debs libvirt-deps guest-disk trace windows-deps
	$(MAKE) lint-tidy
	$(MAKE) windows windows-zip
	rm -rf $(BUILD)/coverage
	QEMU_BIN=$(QEMU_BIN) GUEST_KERNEL=$(GUEST_KERNEL) GUEST_INITRD=$(GUEST_INITRD) UNCOVERED_AREAS='run vm windows' \
	  node_modules/.bin/c8 --all --include 'dist/backend/src/**' --temp-directory $(BUILD)/coverage/tmp \
	  --report-dir $(BUILD)/coverage --reporter=text-summary --check-coverage --lines $(COVERAGE_FLOOR) bash test/areas.sh; \
	  rc=$$?; rm -rf $(BUILD)/coverage/tmp; exit $$rc # V8's raw coverage: 400 MB, read once

# The library and device tests alone (no QEMU, no guest).
test-unit: node guest-libcuda guest-debs libvirt-deps guest-cuda-programs
	bash test/areas.sh addon vhost-user qcuda cli tools guest-lib

# The quick tier: what node, gcc and CUDA's headers can run (no apt, no QEMU,
# no guest, no build of the guest libraries): the library, device,
# emu-provider and fake-driver tests, test/guest-lib, the docs and rules.
# Left out, as they need what only make test builds or installs: the built
# libcuda.so.1 and guest programs (CHECK_NEEDS_GUEST), the .deb packages,
# systemd-analyze.
CHECK_NEEDS_GUEST := cli/libcuda cli/packages cli/systemd qcuda/link-guest qcuda/hostile-shm
check: node
	bash test/areas.sh addon vhost-user qcuda cli tools guest-lib -- $(foreach t,$(CHECK_NEEDS_GUEST),'!dist/test/$(t).test.js')

# The demo through the installed launcher, which needs no environment
# (packaging/install.mk): its "Next, try" lines work as printed.
run: install
	env -u QEMU_BIN -u GUEST_KERNEL -u GUEST_INITRD '$(BINDIR)/qcuda' vm --demo

# libvirt (test/vm/libvirt.test.ts: virsh defines and starts a domain with
# the device) and systemd-analyze (test/cli/systemd.test.ts checks the unit).
LIBVIRT_PKGS := libvirt-daemon-system libvirt-clients systemd
.PHONY: libvirt-deps
libvirt-deps:
	@[ "$$(dpkg-query -W -f='$${Status}\n' $(LIBVIRT_PKGS) 2>/dev/null | grep -c 'install ok installed')" = $(words $(LIBVIRT_PKGS)) ] || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(LIBVIRT_PKGS); }

bench: node
	node dist/test/bench/vhost-user.js

clean:
	rm -rf dist build addon/build

include qemu-patches/qemu.mk
include vm-images/vm.mk
include guest-driver/guest.mk
include guest-driver/lib/lib.mk
include guest-driver/libcuda/libcuda.mk
include guest-driver/nvml/nvml.mk
include guest-driver/trace/trace.mk
include test/guest/guest-tests.mk
include packaging/packaging.mk
include packaging/install.mk
include vm-images/disk/disk.mk
include lint/lint.mk
include guest-driver/windows/windows.mk

# Everything a GPU machine needs (no network, no Node.js there) in .carry/;
# then on it: bash test/gpu/run.sh (the device tool carries .carry).
gpu-bundle: node vm trace
	QEMU_BIN=$(QEMU_BIN) GUEST_KERNEL=$(GUEST_KERNEL) GUEST_INITRD=$(GUEST_INITRD) bash test/gpu/bundle.sh
# The same without QEMU and the guest kernel: the `qcuda run` parts only.
.PHONY: gpu-bundle-run
gpu-bundle-run: node guest-lib guest-libcuda guest-programs guest-cuda-programs guest-cuda-static trace
	LIGHT=1 bash test/gpu/bundle.sh
.PHONY: gpu-bundle
