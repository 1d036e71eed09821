#!/usr/bin/env bash
# The test command of the README: every crate's unit, integration and doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
