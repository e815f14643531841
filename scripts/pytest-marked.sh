#!/usr/bin/env bash
# Run the tests carrying one marker (soak, fuzz); say so plainly when none exist yet.
# `fuzz` then prints the campaign's summary (frames per second, invariant checks and
# violations, from build/fuzz/long-*.json) and writes it to build/fuzz/summary.md.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$1" = fuzz ]; then
  rm -f build/fuzz/long-*.json build/fuzz/long-*.json.progress
fi
.venv/bin/python -m pytest -n auto --durations=25 -m "$1" tb
rc=$?
if [ $rc = 5 ]; then
  echo "make $1: no tests are marked '$1' yet (see the open issues); nothing was run"
  exit 0
fi
if [ "$1" = fuzz ]; then
  PYTHONPATH=.:rtl .venv/bin/python -m tb.system.fuzz_summary
fi
exit $rc
