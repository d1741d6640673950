# SPDX-License-Identifier: MIT
# Sourced by the scripts that need a redis-server of their own (the demo, the packages stage,
# the benchmarks): private_redis_start starts one on a free loopback port, without persistence,
# its files in a new temporary folder, and waits until it answers PING; it sets port, url,
# redis_pid and redis_dir. private_redis_stop stops that server, by its pid (never another), and
# removes its folder. The caller decides when to stop it (its own EXIT trap).

private_redis_start() {
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
  redis_dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$redis_dir" \
    --daemonize no --loglevel warning --logfile "$redis_dir/redis.log" &
  redis_pid=$!
  url=redis://127.0.0.1:$port
  local deadline=$((SECONDS + 10))
  until [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]]; do
    if ! kill -0 "$redis_pid" 2>/dev/null || ((SECONDS >= deadline)); then
      echo "redis-server on port $port did not answer PING; its log:" >&2
      cat "$redis_dir/redis.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
}

private_redis_stop() {
  if [[ -n ${redis_pid:-} ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=
  fi
  if [[ -n ${redis_dir:-} ]]; then
    rm -rf "$redis_dir"
    redis_dir=
  fi
}
