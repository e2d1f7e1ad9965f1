# qcuda on PATH. Included by the top-level Makefile (BUILD, QEMU_BIN,
# GUEST_KERNEL, GUEST_INITRD defined before).
#
#   make install   build (node, vm), then put launchers for qcuda and
#                  qcuda-backend in $(BINDIR): PREFIX=/usr/local for root,
#                  else ~/.local (BINDIR=PREFIX/bin). make run does it too.
#   make uninstall remove them
#
# A launcher runs this checkout's dist/ with the node that built it (absolute
# paths: it works with an empty environment). qcuda finds QEMU, the kernel and
# the initramfs in build/qcuda-paths.json (backend/src/cli/build-paths.ts),
# which every make vm rewrites: QEMU's cache folder is named by a hash that
# only the build knows.

PREFIX ?= $(if $(filter 0,$(shell id -u)),/usr/local,$(HOME)/.local)
BINDIR ?= $(PREFIX)/bin
QCUDA_PATHS := $(BUILD)/qcuda-paths.json
NODE_BIN := $(shell command -v node)

.PHONY: install install-bin uninstall qcuda-paths

vm: qcuda-paths

# Rewritten only when a path changed (no needless mtime change).
qcuda-paths:
	@mkdir -p $(BUILD)
	@node -e 'const [qemu, kernel, initrd] = process.argv.slice(1); process.stdout.write(JSON.stringify({ qemu, kernel, initrd }, null, 2) + "\n")' \
	  '$(QEMU_BIN)' '$(GUEST_KERNEL)' '$(GUEST_INITRD)' > $(QCUDA_PATHS).tmp
	@cmp -s $(QCUDA_PATHS).tmp $(QCUDA_PATHS) && rm $(QCUDA_PATHS).tmp || mv $(QCUDA_PATHS).tmp $(QCUDA_PATHS)

install: node vm install-bin

# The launchers alone (what install adds to a built tree).
install-bin: qcuda-paths
	@case '$(CURDIR)$(NODE_BIN)' in *"'"*) echo "install: a path with a ' in it cannot go in a launcher" >&2; exit 1;; esac
	@mkdir -p '$(BINDIR)'
	@for cmd in qcuda qcuda-backend; do \
	  printf '#!/bin/sh\n# %s of the qcuda build in %s (make install)\nexec '"'"'%s'"'"' '"'"'%s'"'"' "$$@"\n' \
	    $$cmd '$(CURDIR)' '$(NODE_BIN)' '$(CURDIR)/dist/backend/src/cli/'$${cmd#qcuda-}'.js' > '$(BINDIR)'/$$cmd.tmp && \
	  chmod 755 '$(BINDIR)'/$$cmd.tmp && mv '$(BINDIR)'/$$cmd.tmp '$(BINDIR)'/$$cmd; done
	@echo "installed $(BINDIR)/qcuda and $(BINDIR)/qcuda-backend"
	@case ":$$PATH:" in *':$(BINDIR):'*) ;; *) echo "note: $(BINDIR) is not on your PATH: add it (export PATH=\"$(BINDIR):\$$PATH\")";; esac

uninstall:
	rm -f '$(BINDIR)/qcuda' '$(BINDIR)/qcuda-backend'
