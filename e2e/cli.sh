#!/usr/bin/env bash
# Runs `python -m e2e "$@"` with $PYTHON (default python3) from anywhere. It does not put
# the repository root at the head of sys.path as `python -m` from the root would: there
# the repository's operator/ folder shadows the standard library's `operator` module.
root="$(cd "$(dirname "$0")/.." && pwd)"
exec "${PYTHON:-python3}" -P -c 'import runpy, sys
sys.path.append(sys.argv.pop(1))
runpy.run_module("e2e", run_name="__main__", alter_sys=True)' "$root" "$@"
