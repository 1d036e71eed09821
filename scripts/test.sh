#!/usr/bin/env bash
# The test command of the README. Installs the servers the storage tests start
# on 127.0.0.1 (moto_server for S3, nginx for HTTP) when they are missing, runs
# the guide examples, then every crate's unit, integration and doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v moto_server >/dev/null 2>&1; then
    python3 -m pip install --quiet 'moto[server]'
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi
if ! command -v nginx >/dev/null 2>&1 && ! [ -x /usr/sbin/nginx ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light
    fi
fi
export PATH="$PATH:/usr/sbin"

# The guide examples, one per tuning topic, each a small runnable program.
for example in fetch_and_batch enable_observability prefetch_shards operator_parallelism prefetch_batches async_loop; do
    echo "== example $example"
    cargo run --quiet -p zephon-examples --example "$example" > /dev/null
done

cargo test --workspace

# Burn's Learner fed by Zephon loaders (feature `train`, which nothing in
# the workspace turns on, so `--workspace` does not build it).
cargo test -p zephon-burn --features train --test learner
cargo test -p zephon-burn --features train --doc train
