#!/usr/bin/env bash
# No hand-written source over 900 lines (CONTRIBUTING.md, "Code"): a file
# that long holds more than one concept, and review after review found the
# cap written in prose drifting. Sources are TypeScript, JavaScript, C, C++,
# CUDA, make files and scripts (by extension, or any file starting with #!),
# tests included. Generated files are exempt: the ones listed in
# backend/src/tools/generated.ts and any that says "do not edit" in its first
# lines (gen-tables.sh's, gen-libcuda.mjs's outputs).
#
#   bash lint/file-size.sh [ROOT]    names each file over the cap, exits 1
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
MAX=900

# Tracked files and new ones not yet added (a file still being written is
# checked too); outside a git checkout (a source tarball), every file.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files --cached --others --exclude-standard)
else
  files=$(find . -type f -not -path './node_modules/*' -not -path './.git/*' -not -path './dist/*' -not -path './build/*' | sed 's|^\./||')
fi
# The keys of GENERATED_FILES: lines of the form  'path': generator,
generated=$(sed -n "s/^ *'\([^']*\)': [A-Za-z]*,\$/\1/p" backend/src/tools/generated.ts)
[ -n "$generated" ] || { echo "file-size.sh: no generated files read from backend/src/tools/generated.ts" >&2; exit 2; }

# Sources by extension, and extensionless files that start with #!.
src='\.(ts|mjs|js|cjs|c|h|cc|cpp|cu|cuh|sh|py|pl|mk|gyp)$|(^|/)Makefile$'
while IFS= read -r f; do
  [ -f "$f" ] || continue # tracked but deleted in the work tree
  if [[ "$f" =~ $src ]]; then echo "$f"
  elif [[ ! "$f" =~ \.[A-Za-z0-9]+$ ]] && [ "$(head -c 2 "$f")" = '#!' ]; then echo "$f"; fi
done <<<"$files" | grep -vxF "$generated" | tr '\n' '\0' | xargs -0 -r wc -l | awk -v max="$MAX" '
  $2 != "total" && $1 > max {
    cmd = "head -n 5 \"" $2 "\""; gen = 0
    while ((cmd | getline l) > 0) if (tolower(l) ~ /do not edit/) gen = 1
    close(cmd)
    if (!gen) { printf "%s: %d lines, over the cap of %d: split it by concept (CONTRIBUTING.md, \"Code\")\n", $2, $1, max; over = 1 }
  }
  END { exit over }'
