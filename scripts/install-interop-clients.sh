#!/usr/bin/env bash
# Install the real third-party RocketMQ clients that tests/interop drives:
#   * the official C++ client, via PyPI `rocketmq==0.4.4`, in its own venv (.venv-interop/) because it
#     installs a top-level `rocketmq` module that must not shadow anything in the project venv;
#   * the Node client `ali-ons` (+ `urllib` as its httpclient) and the official Node 5.x (gRPC) client
#     `rocketmq-client-nodejs`, into tests/interop/node_modules.
# (The official Python 5.x client comes with the project venv's `grpc` extra: see the Makefile.)
# Idempotent. Without node/npm the ali-ons part is skipped with a message (its tests then skip with
# the same reason); any other failure stops the script so that `make test` retries it next time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python3}"

if [ ! -x "$root/.venv-interop/bin/python" ]; then
    "$py" -m venv "$root/.venv-interop"
fi
if ! "$root/.venv-interop/bin/python" -c 'import rocketmq.client' 2>/dev/null; then
    "$root/.venv-interop/bin/pip" install --quiet 'rocketmq==0.4.4'
fi

if command -v npm >/dev/null 2>&1; then
    if [ ! -d "$root/tests/interop/node_modules/ali-ons" ] \
        || [ ! -d "$root/tests/interop/node_modules/rocketmq-client-nodejs" ]; then
        (cd "$root/tests/interop" && npm ci --no-audit --no-fund --loglevel=error)
    fi
else
    echo "install-interop-clients: npm not found; the Node interop tests will skip" >&2
fi
