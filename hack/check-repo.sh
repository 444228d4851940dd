#!/usr/bin/env bash
# Repository hygiene, run by `make test`: fails on a committed executable (build outputs belong in
# .gitignore) and on a non-test Go file over 500 lines (one concern a file; generated code excepted).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  # ELF, Mach-O and PE executables by their magic numbers: no dependency on file(1).
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46|feedface|feedfacf|cefaedfe|cffaedfe|cafebabe|4d5a*)
      echo "check-repo: $f is a committed executable: remove it (git rm --cached) and ignore it in .gitignore" >&2
      status=1 ;;
  esac
done < <(git ls-files -z)

while IFS= read -r f; do
  case "$f" in *_test.go|*zz_generated*) continue ;; esac
  [ -f "$f" ] || continue
  n=$(wc -l < "$f")
  if [ "$n" -gt 500 ]; then
    echo "check-repo: $f has $n lines, more than 500: split it by concern" >&2
    status=1
  fi
done < <(git ls-files '*.go')

exit "$status"
