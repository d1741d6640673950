# SPDX-License-Identifier: MIT
"""The seed's Python queue (shared/seeds/000_*.txt), reduced to what the interop tests need:
its TaskProducer.send_task and TaskConsumer message handling, unchanged in what they write
and read. Usage:
    seed_queue.py produce <url> <stream> <count>   -> prints one task id per line
    seed_queue.py consume <url> <stream> <count>   -> prints one JSON line per handled task
"""
import json
import sys
import uuid
from datetime import datetime

import redis


class TaskProducer:
    def __init__(self, redis_url, stream):
        self.redis = redis.from_url(redis_url, decode_responses=True)
        self.stream = stream

    def send_task(self, task_type, payload, max_retries=3):
        task_id = str(uuid.uuid4())
        message = {
            "task_id": task_id,
            "task_type": task_type,
            "payload": json.dumps(payload),
            "created_at": datetime.utcnow().isoformat(),
            "max_retries": str(max_retries),
            "retry_count": "0",
        }
        self.redis.xadd(self.stream, message, maxlen=10000)
        return task_id


class TaskConsumer:
    def __init__(self, redis_url, stream, group="workers", consumer_name=None):
        self.redis = redis.from_url(redis_url, decode_responses=True)
        self.stream = stream
        self.group = group
        self.consumer = consumer_name or f"worker-{uuid.uuid4().hex[:8]}"
        self.handlers = {}
        try:
            self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def register(self, task_type, handler):
        self.handlers[task_type] = handler

    def run_until(self, count):
        handled = 0
        while handled < count:
            messages = self.redis.xreadgroup(
                groupname=self.group, consumername=self.consumer,
                streams={self.stream: ">"}, count=10, block=2000)
            if not messages:
                raise SystemExit("seed consumer: no message within 2 s")
            for _, entries in messages:
                for msg_id, data in entries:
                    self._handle_message(msg_id, data)
                    handled += 1

    def _handle_message(self, msg_id, data):
        handler = self.handlers.get(data.get("task_type"))
        if not handler:
            self.redis.xack(self.stream, self.group, msg_id)
            return
        payload = json.loads(data["payload"])
        handler(data, payload)
        self.redis.xack(self.stream, self.group, msg_id)


def main():
    mode, url, stream, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "produce":
        producer = TaskProducer(url, stream)
        for i in range(count):
            print(producer.send_task("send_email", {"to": "user@example.com", "order_id": i}))
    elif mode == "consume":
        consumer = TaskConsumer(url, stream, group="seed-workers")

        def record(data, payload):
            datetime.fromisoformat(data["created_at"])  # the seed's format must parse
            print(json.dumps({
                "task_id": data["task_id"],
                "task_type": data["task_type"],
                "payload": payload,
                "retry_count": int(data.get("retry_count", 0)),
                "max_retries": int(data.get("max_retries", 3)),
            }), flush=True)

        for task_type in ("send_email", "generate_pdf", "reindex"):
            consumer.register(task_type, record)
        consumer.run_until(count)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
