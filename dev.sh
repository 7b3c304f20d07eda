#!/usr/bin/env bash
# One entry point for a fresh machine (Python 3.10+): makes .venv, installs dynoq with
# its extras, then runs what you asked for.
#   ./dev.sh demo    the demo (a private embedded server unless DYNOQ_URL is set)
#   ./dev.sh test    lint, type check and the test suite (then, with no arguments, the
#                    Django suite: ./dev.sh django)
#   ./dev.sh django  tests/test_django.py in .venv-django (Django 6 needs Python 3.12+:
#                    $DJANGO_PYTHON, else python3.13/3.12 on PATH or in pyenv), on SQLite
#                    and, when it answers on 127.0.0.1:5432, PostgreSQL
#   ./dev.sh bench   the core benchmark
#   ./dev.sh unasync write the sync shells from their asyncio twins (scripts/unasync.py;
#                    --check, --force)
#   ./dev.sh floor   the half-open and cluster tests on the oldest redis-py pyproject.toml allows
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
# A Python 3.12+ for Django 6 (the main venv may be older: dynoq itself keeps 3.10+).
django_python() {
  local p
  for p in ${DJANGO_PYTHON:-} python3.13 python3.12 \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python; do
    if command -v "$p" >/dev/null 2>&1 \
        && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
django_suite() {
  local py dstamp=.venv-django/.dynoq-installed
  if ! py=$(django_python); then
    echo "no Python 3.12+ found for the Django tests: set DJANGO_PYTHON" >&2
    return 1
  fi
  [ -x .venv-django/bin/python ] || "$py" -m venv .venv-django
  if [ ! -f "$dstamp" ] || [ pyproject.toml -nt "$dstamp" ]; then
    .venv-django/bin/python -m pip install -q --upgrade pip
    .venv-django/bin/python -m pip install -q -e ".[test-django]"
    touch "$dstamp"
  fi
  DJANGO_TEST_ENGINE=sqlite .venv-django/bin/python -m pytest tests/test_django.py \
    -n "${DYNOQ_TEST_WORKERS:-3}" "$@"
  # docs/django.md's blocks that need Django (the main suite skips them)
  .venv-django/bin/python -m pytest tests/test_doc_blocks.py -k django "$@"
  if .venv-django/bin/python -c 'import socket; socket.create_connection(("127.0.0.1", 5432), 1)' \
      2>/dev/null; then
    DJANGO_TEST_ENGINE=postgres .venv-django/bin/python -m pytest tests/test_django.py \
      -n "${DYNOQ_TEST_WORKERS:-3}" "$@"
  else
    echo "PostgreSQL does not answer on 127.0.0.1:5432: the Django suite ran on SQLite only"
  fi
}
case "${1:-test}" in
  demo)
    shift || true
    exec .venv/bin/dynoq demo "$@" ;;
  test)
    shift || true
    .venv/bin/ruff check dynoq tests benchmarks spark examples scripts
    .venv/bin/ruff format --check dynoq tests benchmarks spark examples scripts
    .venv/bin/mypy
    # Four workers on two cores: most tests wait on servers, subprocesses and timers, not
    # the CPU (a full run kept the CPU about half busy with three).
    if [ $# -gt 0 ]; then
      exec .venv/bin/python -m pytest -n "${DYNOQ_TEST_WORKERS:-4}" --dist loadgroup "$@"
    fi
    .venv/bin/python -m pytest -n "${DYNOQ_TEST_WORKERS:-4}" --dist loadgroup
    django_suite ;;
  django)
    shift || true
    django_suite "$@" ;;
  bench)
    shift || true
    exec .venv/bin/python -m benchmarks.bench_core "$@" ;;
  unasync)
    shift || true
    exec .venv/bin/python scripts/unasync.py "$@" ;;
  floor)
    # The bounds on every connection (tests/test_halfopen.py) and the cluster client
    # (tests/test_cluster.py: redis-py's own cluster code changed most across versions)
    # on the floor redis-py: that one package in a directory of its own, put in front.
    shift || true
    floor=$(sed -n 's/.*"redis\[hiredis\]>=\([0-9.]*\).*/\1/p' pyproject.toml)
    dir=.venv/redis-$floor
    [ -d "$dir" ] || .venv/bin/python -m pip install -q --no-deps --target "$dir" "redis==$floor"
    PYTHONPATH=$dir .venv/bin/python -c "import redis; assert redis.__version__ == '$floor', redis.__version__"
    PYTHONPATH=$dir exec .venv/bin/python -m pytest tests/test_halfopen.py tests/test_cluster.py \
      -n "${DYNOQ_TEST_WORKERS:-3}" "$@" ;;
  docs)
    shift || true
    NO_MKDOCS_2_WARNING=1 exec .venv/bin/mkdocs serve "$@" ;;
  *)
    echo "usage: ./dev.sh demo|test|django|bench|unasync|floor|docs [args]" >&2
    exit 2 ;;
esac
