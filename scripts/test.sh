#!/usr/bin/env bash
# The test command of the README. Installs the servers the storage tests start
# on 127.0.0.1 (moto_server for S3, nginx for HTTP, gcp-storage-emulator for
# Google Cloud Storage, Azurite for Azure Blob, Prometheus for the metrics
# endpoint) when they are missing, runs
# every crate's unit, integration and doc tests, then the guide examples.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v moto_server >/dev/null 2>&1; then
    python3 -m pip install --quiet 'moto[server]'
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi
if ! command -v gcp-storage-emulator >/dev/null 2>&1; then
    python3 -m pip install --quiet gcp-storage-emulator
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi
apt_install() {
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    fi
}
if ! command -v nginx >/dev/null 2>&1 && ! [ -x /usr/sbin/nginx ]; then
    apt_install nginx-light
fi
# Prometheus scrapes `zephon run --metrics-addr` in zephon-cli's tests.
if ! command -v prometheus >/dev/null 2>&1; then
    apt_install prometheus
fi
if ! command -v azurite-blob >/dev/null 2>&1; then
    command -v npm >/dev/null 2>&1 || apt_install npm
    if [ "$(id -u)" = 0 ]; then npm install --global --silent azurite; else sudo npm install --global --silent azurite; fi
fi
export PATH="$PATH:/usr/sbin"
# Where npm put azurite-blob, if that is not on the PATH already.
if command -v npm >/dev/null 2>&1; then PATH="$PATH:$(npm prefix --global)/bin"; fi

# zephon-cli turns on zephon-burn's `media` feature, so this build of
# zephon-burn has it: its image and audio conversions and the image
# classifier of the timing harness are tested here, in the same test binary.
cargo test --workspace

# The guide examples, one per tuning topic, each a small runnable program,
# run from the binaries the test build made: `cargo run -p zephon-examples`
# resolves the workspace's features otherwise and built every crate again.
for example in fetch_and_batch enable_observability prefetch_shards operator_parallelism prefetch_batches async_loop autotune; do
    echo "== example $example"
    "${CARGO_TARGET_DIR:-target}"/debug/examples/"$example" > /dev/null
done

# Burn's Learner fed by Zephon loaders (feature `train`, which nothing in
# the workspace turns on, so `--workspace` does not build it).
cargo test -p zephon-burn --features train --test learner
cargo test -p zephon-burn --features train --doc train
