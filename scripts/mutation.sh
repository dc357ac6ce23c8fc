#!/usr/bin/env bash
# Mutation testing of the pure decision modules, on demand (not in CI's default path):
# installs mutmut from the hash-locked scripts/mutation.lock into .venv, then
# scripts/mutation.py mutates each module with only the tests that cover it and prints the
# share of mutants killed per module. Arguments go to scripts/mutation.py (--help).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
if ! .venv/bin/python -c "import mutmut" 2>/dev/null; then
  if [ -f .venv/uv.env ] && [ -x .venv/bin/uv ]; then
    # the lock pins every file by hash; a machine's constraints file (uv.env's
    # UV_CONSTRAINT, from pip.conf) may hold ranges, which --require-hashes refuses
    # shellcheck disable=SC1091
    (. .venv/uv.env && unset UV_CONSTRAINT && .venv/bin/uv pip install --quiet \
      --python .venv/bin/python \
      --require-hashes -r scripts/mutation.lock)
  else
    .venv/bin/python -m pip install --quiet --require-hashes -r scripts/mutation.lock
  fi
fi
exec .venv/bin/python scripts/mutation.py "$@"
