# Lint and format checks. Included by the top-level Makefile (SHELL, CACHE).
#
#   make lint     checks only: the rules of CONTRIBUTING.md that a script can
#                 judge (file sizes, commit messages), ESLint, Prettier,
#                 clang-format, checkpatch.pl
#   make hooks    installs lint/commit-msg as this checkout's commit-msg hook
#   make format   rewrites the files into the checked form (Prettier,
#                 clang-format, the kernel module's block comments)
#
# TypeScript and the .mjs generators: ESLint (eslint.config.mjs) and Prettier
# (.prettierrc.json). The addons' C++ (addon/src, and vhost-user-ts's in
# backend/src/vhost-user/native) and the guest C libraries and test
# programs: clang-format (.clang-format, guest-driver/.clang-format,
# test/.clang-format). The guest kernel module and the headers it shares with
# the guest (guest-driver/kernel, guest-driver/include): the kernel's own
# checkpatch.pl (lint/checkpatch.sh fetches it once into $(CACHE)).
# Generated files ("do not edit": `npm run gen`, gen-tables.sh) are left as
# their generators write them.

LINT_APT_PKGS := clang-format clang-tidy perl
CHECKPATCH := $(CURDIR)/lint/checkpatch.sh
PRETTIER_FILES := '{backend,test}/**/*.ts' '**/*.mjs'
# Every C/C++/CUDA source but the kernel module's, less the generated ones.
CLANG_FORMAT_FILES = $(shell find addon/src backend/src/vhost-user/native guest-driver/lib guest-driver/libcuda guest-driver/nvml guest-driver/trace guest-driver/windows test \
	-type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sort | xargs grep -L 'do not edit')
KERNEL_FILES = $(sort $(wildcard guest-driver/kernel/*.c guest-driver/kernel/*.h guest-driver/include/*.h))

.PHONY: lint format lint-deps lint-ts lint-c lint-rules lint-tidy hooks

lint-deps:
	@[ "$$(dpkg-query -W -f='$${Status}\n' $(LINT_APT_PKGS) 2>/dev/null | grep -c 'install ok installed')" = $(words $(LINT_APT_PKGS)) ] || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(LINT_APT_PKGS); }

lint: lint-rules lint-ts lint-c

# The written rules (CONTRIBUTING.md): no hand-written file over 900 lines;
# every commit after lint/commits-base has an area, a short subject and a body.
lint-rules:
	bash lint/file-size.sh
	node lint/commits.mjs

# The static analyzer over the guest C (lint/tidy.sh): minutes, not seconds,
# so make test runs it and make lint does not. It reads libcuda's generated
# headers.
lint-tidy: lint-deps $(GUEST_CU_GEN)/cu_twins.h $(GUEST_CU_GEN)/cu_errnames.h
	bash lint/tidy.sh $(GUEST_CU_GEN)

# The hooks folder is the main checkout's, shared by its worktrees: a copy,
# not a link into one worktree, and the hook runs the check of whichever
# worktree commits.
hooks:
	install -m 755 lint/commit-msg "$$(git rev-parse --git-path hooks)/commit-msg"

lint-ts: node_modules/.installed
	node_modules/.bin/eslint --max-warnings 0 .
	node_modules/.bin/prettier --check --log-level warn $(PRETTIER_FILES)

# --no-tree: checkpatch runs on files outside a kernel tree; -q: only problems.
lint-c: lint-deps
	clang-format --dry-run --Werror $(CLANG_FORMAT_FILES)
	@cp=$$(CACHE='$(CACHE)' bash $(CHECKPATCH)) && echo "$$cp --no-tree -f -q $(KERNEL_FILES)" && \
	  perl "$$cp" --no-tree -f -q $(KERNEL_FILES)

# checkpatch has no fix for its one finding here (a block comment's closing
# */ on its last text line, BLOCK_COMMENT_STYLE): the perl line moves it to a
# line of its own, in the hand-written kernel files only.
format: lint-deps node_modules/.installed
	node_modules/.bin/prettier --write --log-level warn $(PRETTIER_FILES)
	clang-format -i $(CLANG_FORMAT_FILES)
	perl -pi -e 's{^(\s*)\* (.*\S)\s*\*/\s*$$}{$$1* $$2\n$$1*/\n}' $$(grep -L 'do not edit' $(KERNEL_FILES))
