#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/tracked_floor.py on a private redis-server (see its header).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/private_redis.sh
source bench/private_redis.sh
/usr/bin/python3 bench/tracked_floor.py "$port" "$redis_pid"
