#!/usr/bin/env bash
# One entry point for a fresh machine (Python 3.10+): makes .venv, installs dynoq with
# its extras, then runs what you asked for.
#   ./dev.sh demo    the demo (a private embedded server unless DYNOQ_URL is set)
#   ./dev.sh test    lint, type check and the test suite
#   ./dev.sh bench   the core benchmark
#   ./dev.sh unasync write the sync shells from their asyncio twins (scripts/unasync.py;
#                    --check, --force)
#   ./dev.sh floor   the half-open tests on the oldest redis-py pyproject.toml allows
#   ./dev.sh docs    the documentation site at http://127.0.0.1:8000/ (mkdocs serve)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.dynoq-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev]"
  touch "$stamp"
fi
case "${1:-test}" in
  demo)
    shift || true
    exec .venv/bin/dynoq demo "$@" ;;
  test)
    shift || true
    .venv/bin/ruff check dynoq tests benchmarks spark examples scripts
    .venv/bin/ruff format --check dynoq tests benchmarks spark examples scripts
    .venv/bin/mypy
    # Three workers: most tests wait on servers, subprocesses and timers, not the CPU.
    exec .venv/bin/python -m pytest -n "${DYNOQ_TEST_WORKERS:-3}" --dist loadgroup "$@" ;;
  bench)
    shift || true
    exec .venv/bin/python -m benchmarks.bench_core "$@" ;;
  unasync)
    shift || true
    exec .venv/bin/python scripts/unasync.py "$@" ;;
  floor)
    # The bounds on every connection (tests/test_halfopen.py) on the floor redis-py: that
    # one package in a directory of its own, put in front of the venv's.
    shift || true
    floor=$(sed -n 's/.*"redis\[hiredis\]>=\([0-9.]*\).*/\1/p' pyproject.toml)
    dir=.venv/redis-$floor
    [ -d "$dir" ] || .venv/bin/python -m pip install -q --no-deps --target "$dir" "redis==$floor"
    PYTHONPATH=$dir .venv/bin/python -c "import redis; assert redis.__version__ == '$floor', redis.__version__"
    PYTHONPATH=$dir exec .venv/bin/python -m pytest tests/test_halfopen.py \
      -n "${DYNOQ_TEST_WORKERS:-3}" "$@" ;;
  docs)
    shift || true
    NO_MKDOCS_2_WARNING=1 exec .venv/bin/mkdocs serve "$@" ;;
  *)
    echo "usage: ./dev.sh demo|test|bench|unasync|floor|docs [args]" >&2
    exit 2 ;;
esac
