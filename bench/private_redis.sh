# SPDX-License-Identifier: MIT
# Sourced by the bench scripts: starts a private redis-server on a free loopback port (no
# persistence) that is stopped, by its pid, when the script exits, and sets port, url and
# cli (redis-cli on that server, output discarded).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis_dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$redis_dir" \
  --daemonize no --loglevel warning --logfile "$redis_dir/redis.log" &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$redis_dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
url=redis://127.0.0.1:$port
cli() { redis-cli -p "$port" "$@" >/dev/null; }
