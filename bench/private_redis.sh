# SPDX-License-Identifier: MIT
# Sourced by the bench scripts: a private redis-server (scripts/private_redis.sh) that is
# stopped, by its pid, when the script exits; sets port, url and cli (redis-cli on that server,
# output discarded).
# shellcheck source=scripts/private_redis.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/private_redis.sh"
private_redis_start
trap private_redis_stop EXIT
cli() { redis-cli -p "$port" "$@" >/dev/null; }
