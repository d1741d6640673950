# SPDX-License-Identifier: MIT
"""The streamq command, driven as an operator or a script would: exit statuses, JSON output,
confirmation, bulk enqueue from stdin, dead-letter replay that a real worker then runs, and
the exporter's /metrics read by the Prometheus text parser. Each test class starts its own
redis-server on a free loopback port and stops only that process.

Run by ctest with STREAMQ_CLI (bin/streamq) and STREAMQ_WORKER (the example worker) set."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import unittest
import urllib.request

import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import CLI, RedisTestCase, free_port, wait_for

WORKER = os.environ["STREAMQ_WORKER"]


class CliTest(RedisTestCase):
    def setUp(self):
        self.q = "cli-" + self._testMethodName

    def test_enqueue_list_and_find_in_json(self):
        p = self.cli("enqueue", self.q, "send_email", '{"to":"a@b.c"}', "--task-id", "job-1")
        self.assertEqual(p.stdout.strip(), "job-1")
        lines = "".join(json.dumps({"type": "reindex", "payload": {"n": i}}) + "\n" for i in range(1200))
        lines += json.dumps({"type": "later", "delay_ms": 3600000, "task_id": "later-1"}) + "\n"
        p = self.cli("enqueue", self.q, "--stdin", "--format", "json", stdin=lines)
        self.assertEqual(json.loads(p.stdout), {"enqueued": 1201, "finished": True})
        self.assertEqual(self.r.xlen(self.q), 1201)

        page = json.loads(self.cli("tasks", self.q, "--count", "500", "--format", "json").stdout)
        self.assertEqual(len(page["tasks"]), 500)
        self.assertNotEqual(page["next_cursor"], "")
        rest = json.loads(self.cli("tasks", self.q, "--count", "1000", "--cursor", page["next_cursor"],
                                   "--format", "json").stdout)
        self.assertEqual(len(rest["tasks"]), 701)
        self.assertEqual(rest["next_cursor"], "")
        self.assertEqual(page["tasks"][0]["fields"]["task_id"], "job-1")

        task = json.loads(self.cli("task", self.q, "job-1", "--format", "json").stdout)
        self.assertEqual(task["state"], "queued")
        self.assertEqual(task["fields"]["payload"], '{"to":"a@b.c"}')
        delayed = json.loads(self.cli("delayed", "list", self.q, "--format", "json").stdout)
        self.assertEqual([t["id"] for t in delayed["tasks"]], ["later-1"])
        self.cli("delayed", "run", self.q, "later-1")
        self.assertEqual(self.r.zcard(self.q + ":delayed"), 0)
        self.assertEqual(self.r.xlen(self.q), 1202)

        queues = json.loads(self.cli("queues", "--format", "json").stdout)
        self.assertIn(self.q, [q["name"] for q in queues])
        stats = json.loads(self.cli("stats", self.q, "--format", "json").stdout)
        self.assertEqual(stats[0]["queue_length"], 1202)

    def test_bulk_enqueue_into_a_full_queue_says_how_many_got_in(self):
        lines = "".join(json.dumps({"type": "reindex", "payload": {"n": i}}) + "\n" for i in range(1500))
        p = self.cli("enqueue", self.q, "--stdin", "--max-len", "1000", stdin=lines, check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("queue full", p.stderr)
        got_in = int(re.search(r"; (\d+) tasks were enqueued, from the first line on", p.stderr).group(1))
        self.assertEqual(got_in, self.r.xlen(self.q))
        self.assertGreater(got_in, 500)  # the first batch, and those of the second that fitted
        self.assertLessEqual(got_in, 1000)
        self.assertIn("--max-len", p.stderr)

    def test_exit_statuses_scripts_rely_on(self):
        self.assertEqual(self.cli("task", self.q, "no-such-task", check=False).returncode, 3)
        self.assertEqual(self.cli("delayed", "run", self.q, "nothing", check=False).returncode, 3)
        self.assertEqual(self.cli("tasks", check=False).returncode, 2)  # queue missing
        self.assertEqual(self.cli("tasks", self.q, "--state", "nonsense", check=False).returncode, 2)
        self.assertEqual(self.cli("enqueue", self.q, "t", "not json", check=False).returncode, 2)
        bad = self.cli("enqueue", self.q, "--stdin", stdin='{"type":"t"}\nnot json\n', check=False)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("line 2", bad.stderr)
        self.assertEqual(self.r.xlen(self.q), 1, "the line before the bad one was enqueued")
        typo = self.cli("enqueue", self.q, "--stdin", stdin='{"type":"t"}\n{"type":"t","task_id":1}\n', check=False)
        self.assertEqual(typo.returncode, 2, typo.stderr)
        self.assertEqual(self.r.xlen(self.q), 2)
        self.assertEqual(self.cli("--url", "redis://127.0.0.1:1", "queues", check=False).returncode, 1)
        # cancel: 0 cancelled, 1 a worker holds it (asked to stop, not cancelled yet), 3 no such task.
        q = self.q + "-cancel"
        held = self.cli("enqueue", q, "t").stdout.strip()
        queued = self.cli("enqueue", q, "t").stdout.strip()
        self.r.xgroup_create(q, "workers", id="0")
        self.r.xreadgroup("workers", "busy-worker", {q: ">"}, count=1)
        running = self.cli("cancel", q, held, "--yes", check=False)
        self.assertEqual(running.returncode, 1, running.stderr)
        self.assertIn("asks the handler to stop", running.stdout)
        self.assertEqual(self.cli("cancel", q, queued, "--yes", check=False).returncode, 0)
        self.assertEqual(self.cli("cancel", q, queued, "--yes", check=False).returncode, 3)
        self.assertEqual(self.cli("--help").returncode, 0)
        for sub in ("queues", "stats", "tasks", "task", "dlq", "delayed", "enqueue", "pause", "resume",
                    "tenants", "schedules", "consumers", "doctor", "exporter", "cancel", "events", "flow",
                    "batch"):
            self.assertIn("--help", self.cli(sub, "--help").stdout, sub)

    def test_destructive_commands_need_a_terminal_or_yes(self):
        self.add_dead(self.q, 3)
        p = self.cli("dlq", "purge", self.q, check=False)
        self.assertEqual(p.returncode, 5)
        self.assertIn("--yes", p.stderr)
        self.assertEqual(self.r.xlen(self.q + ":dlq"), 3, "nothing deleted without confirmation")
        self.assertEqual(self.cli("dlq", "delete", self.q, check=False).returncode, 5)
        p = self.cli("dlq", "purge", self.q, "--yes", "--format", "json")
        self.assertEqual(json.loads(p.stdout), {"purged": 3})
        self.assertEqual(self.r.exists(self.q + ":dlq"), 0)

    def test_replayed_dead_letters_are_run_by_a_worker(self):
        self.add_dead(self.q, 50)
        self.add_dead(self.q, 5, task_type="always_fail")
        listed = json.loads(self.cli("dlq", "list", self.q, "--count", "100", "--format", "json").stdout)
        self.assertEqual(len(listed["tasks"]), 55)
        self.assertEqual(listed["tasks"][0]["fields"]["reason"], "max_retries")
        p = self.cli("dlq", "replay", self.q, "--type", "send_email", "--yes", "--format", "json")
        self.assertEqual(json.loads(p.stdout), {"replayed": 50, "skipped": 0, "finished": True})
        self.assertEqual(self.r.xlen(self.q + ":dlq"), 5)
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--exit-when-idle", "1500"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(worker.returncode, 0, worker.stderr)
        ran = [line for line in worker.stdout.splitlines() if "send_email" in line]
        self.assertEqual(len(ran), 50, worker.stdout)
        self.assertEqual(self.r.xlen(self.q), 0, "every replayed task ran and was acknowledged")
        self.assertEqual(self.r.xlen(self.q + ":dlq"), 5)

    def test_a_tracked_task_shows_its_record_and_its_events(self):
        tracked = self.cli("enqueue", self.q, "send_email", '{"to":"a@b.c"}', "--retention-ms", "60000").stdout.strip()
        untracked = self.cli("enqueue", self.q, "send_email", '{"to":"d@e.f"}').stdout.strip()
        record = json.loads(self.cli("task", self.q, tracked, "--format", "json").stdout)["record"]
        self.assertEqual((record["state"], record["attempts"]), ("queued", 0))
        self.assertNotIn("record", json.loads(self.cli("task", self.q, untracked, "--format", "json").stdout))
        follower = subprocess.Popen([CLI, "--url", self.url, "events", self.q, "--from", "0", "--count", "3",
                                     "--format", "json"], stdout=subprocess.PIPE, text=True)
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--exit-when-idle", "1500"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(worker.returncode, 0, worker.stderr)
        out, _ = follower.communicate(timeout=30)
        self.assertEqual(follower.returncode, 0)
        events = [json.loads(line) for line in out.splitlines()]
        self.assertEqual([(e["event"], e["task_id"]) for e in events],
                         [("enqueued", tracked), ("started", tracked), ("done", tracked)])
        # Done, it left the stream: the record still says what became of it.
        record = json.loads(self.cli("task", self.q, tracked, "--format", "json").stdout)["record"]
        self.assertEqual((record["state"], record["attempts"]), ("done", 1))
        table = self.cli("task", self.q, tracked).stdout
        self.assertIn("record.state", table)
        # One form of time in the table: ISO 8601 UTC, as the task's created_at field.
        self.assertRegex(table, r"record\.finished_at +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
        self.assertNotRegex(table, r"_at_ms|\b1\d{12}\b")

    def test_a_flow_is_shown_as_a_tree_with_each_tasks_state(self):
        # The records a flow's enqueue writes (Producer::enqueue_flow): a parent waiting for two
        # children, one done, one dead; the parent names its children, each child its parent.
        q = self.q
        # A third child is in another queue (FlowNode::queue): the parent's flow_queues names it.
        other = q + "-gpu"
        self.r.hset(q + ":task:root", mapping={"state": "waiting", "type": "report", "attempts": "0",
                                               "flow_children": "4:kid14:kid24:kid3",
                                               "flow_queues": "4:kid3%d:%s" % (len(other), other)})
        self.r.hset(q + ":task:kid1", mapping={"state": "done", "type": "leaf", "flow_parent": "root"})
        self.r.hset(q + ":task:kid2", mapping={"state": "dead", "type": "leaf", "reason": "max_retries",
                                               "flow_parent": "root"})
        self.r.hset(other + ":task:kid3", mapping={"state": "queued", "type": "thumb", "flow_parent": "root",
                                                   "flow_home": q})
        lines = self.cli("flow", q, "root").stdout.splitlines()
        self.assertEqual([line.split() for line in lines],
                         [["root", "report", "waiting"], ["kid1", "leaf", "done"],
                          ["kid2", "leaf", "dead", "(max_retries)"], ["kid3", "thumb", "queued", "[queue", other + "]"]])
        self.assertTrue(lines[1].startswith("  kid1"), lines)
        tree = json.loads(self.cli("flow", q, "root", "--format", "json").stdout)
        self.assertEqual(tree["record"]["children"], ["kid1", "kid2", "kid3"])
        self.assertEqual(tree["record"]["child_queues"], {"kid3": other})
        self.assertEqual([(c["task_id"], c["queue"], c["record"]["state"], c["record"]["parent"])
                          for c in tree["children"]],
                         [("kid1", q, "done", "root"), ("kid2", q, "dead", "root"), ("kid3", other, "queued", "root")])
        self.assertEqual(tree["children"][2]["record"]["parent_queue"], q)
        self.assertEqual(self.cli("flow", q, "nobody", check=False).returncode, 3)

    def test_a_flows_child_shows_its_parent(self):
        self.r.hset(self.q + ":task:root", mapping={"state": "waiting", "type": "report", "attempts": "0",
                                                    "flow_children": "4:kid1"})
        self.r.hset(self.q + ":task:kid1", mapping={"state": "queued", "type": "leaf", "flow_parent": "root"})
        lines = self.cli("flow", self.q, "kid1").stdout.splitlines()
        self.assertEqual(lines[0].split(), ["parent:", "root"], lines)
        self.assertEqual(lines[1].split(), ["kid1", "leaf", "queued"], lines)
        self.assertNotIn("parent", self.cli("flow", self.q, "root").stdout, "a root has none")

    def test_a_batch_shows_its_state_and_counts(self):
        # A batch's hash as Producer::open_batch and the scripts write it: nested in another.
        self.r.hset(self.q + ":batches:nightly", mapping={"state": "closed", "total": "5", "done": "3",
                                                          "failed": "1", "parent": "weekly"})
        rows = [line.split(None, 1) for line in self.cli("batch", self.q, "nightly").stdout.splitlines()]
        self.assertEqual(rows, [["FIELD", "VALUE"], ["batch_id", "nightly"], ["state", "closed"], ["total", "5"],
                                ["done", "3"], ["failed", "1"], ["pending", "1"], ["parent_batch", "weekly"]])
        self.assertEqual(json.loads(self.cli("batch", self.q, "nightly", "--format", "json").stdout),
                         {"batch_id": "nightly", "state": "closed", "total": 5, "done": 3, "failed": 1,
                          "pending": 1, "parent_batch": "weekly"})
        missing = self.cli("batch", self.q, "nothing", check=False)
        self.assertEqual(missing.returncode, 3)
        self.assertIn("no batch nothing", missing.stderr)

    def test_tables_say_times_in_iso_8601_and_deliveries_in_words_that_fit(self):
        self.cli("enqueue", self.q, "later", "--delay-ms", "3600000", "--task-id", "later-1")
        delayed = self.cli("delayed", "list", self.q).stdout
        self.assertRegex(delayed, r"due \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
        self.assertNotRegex(delayed, r"\b1\d{12}\b", "epoch milliseconds")
        # The due time in the listing is the one `streamq task` shows.
        due = re.search(r"due (\S+)", delayed).group(1)
        self.assertRegex(self.cli("task", self.q, "later-1").stdout, r"due_at +" + re.escape(due))
        self.cli("enqueue", self.q, "work", "--task-id", "held-1")
        self.r.xgroup_create(self.q, "workers", id="0")
        # (A name as a consumer given none takes: its host's, and a number.)
        worker = "ip-10-0-12-34.internal-3"
        self.r.xreadgroup("workers", worker, {self.q: ">"}, count=1)
        pending = self.cli("tasks", self.q, "--state", "pending").stdout
        self.assertRegex(pending, r"1 delivery, idle \d+(\.\d)? m?s, " + re.escape(worker), pending)
        self.assertNotIn("\u2026", pending, "a cell was cut")
        self.r.xclaim(self.q, "workers", worker, 0, [self.r.xrange(self.q)[0][0]])
        pending = self.cli("tasks", self.q, "--state", "pending").stdout
        self.assertRegex(pending, r"2 deliveries, idle \d+(\.\d)? m?s, " + re.escape(worker), pending)

    def test_the_holder_of_a_task_whose_worker_was_killed_is_gone(self):
        # A worker's name lock as it stays after kill -9: its key, renewed a moment ago, names the
        # client id of a connection the server has closed.
        self.cli("enqueue", self.q, "work", "--task-id", "held-1")
        self.r.xgroup_create(self.q, "workers", id="0")
        self.r.xreadgroup("workers", "w1", {self.q: ">"}, count=1)
        with socket.create_connection(("127.0.0.1", self.port)) as gone:
            gone.sendall(b"CLIENT ID\r\n")
            gone_id = int(gone.recv(64).strip()[1:])
        wait_for(lambda: str(gone_id) not in [c["id"] for c in self.r.client_list()], what="the close")
        seconds, micros = self.r.time()
        key = "%s:live:%d:workers:w1" % (self.q, len("workers"))
        self.r.set(key, "%d token %d" % (gone_id, seconds * 1000 + micros // 1000), px=60000)
        table = self.cli("task", self.q, "held-1").stdout
        self.assertRegex(table, r"holder +gone", table)
        self.assertNotIn("renewing its lease", table)
        holder = json.loads(self.cli("task", self.q, "held-1", "--format", "json").stdout)["holder"]
        self.assertEqual((holder["gone"], holder["renewing"]), (True, False))
        # A live holder (this test's own connection) renews its lease.
        self.r.set(key, "%d token %d" % (self.r.client_id(), seconds * 1000 + micros // 1000), px=60000)
        holder = json.loads(self.cli("task", self.q, "held-1", "--format", "json").stdout)["holder"]
        self.assertEqual((holder["gone"], holder["renewing"]), (False, True))

    def test_a_partitioned_queue_is_one_queue(self):
        parts = ["{%s:%d}" % (self.q, i) for i in range(3)]
        lines = "".join(json.dumps({"type": "send_email", "payload": {"to": "u%d@example.com" % i}}) + "\n" for i in range(6))
        self.cli("enqueue", self.q, "--stdin", "--partitions", "3", stdin=lines)
        self.assertEqual([self.r.xlen(p) for p in parts], [2, 2, 2], "round robin over the partitions")
        queues = json.loads(self.cli("queues", "--format", "json").stdout)
        self.assertEqual([(q["name"], q["partitions"], q["length"]) for q in queues], [(self.q, parts, 6)])
        stats = json.loads(self.cli("stats", self.q, "--format", "json").stdout)
        self.assertEqual((stats[0]["partitions"], stats[0]["queue_length"]), (3, 6))
        page = json.loads(self.cli("tasks", self.q, "--format", "json").stdout)
        self.assertEqual(sorted(t["partition"] for t in page["tasks"]), sorted(parts * 2))
        # One entry id in two partitions' dead letters: an action must name the partition.
        for p in parts[:2]:
            self.r.xadd(p + ":dlq", {"task_id": "dead-" + p, "task_type": "send_email",
                                     "payload": '{"to":"x@example.com"}',
                                     "created_at": "2026-12-01T00:00:00.000000", "max_retries": "3",
                                     "retry_count": "3", "reason": "max_retries"}, id="5-1")
        ambiguous = self.cli("dlq", "replay", self.q, "--id", "5-1", "--yes", check=False)
        self.assertEqual(ambiguous.returncode, 2, ambiguous.stderr)
        self.assertIn(parts[0] + ", " + parts[1], ambiguous.stderr)
        listed = self.cli("dlq", "list", self.q).stdout
        self.assertIn(parts[1] + "/5-1", listed)
        p = self.cli("dlq", "replay", self.q, "--id", parts[1] + "/5-1", "--yes", "--format", "json")
        self.assertEqual(json.loads(p.stdout), {"replayed": 1, "skipped": 0, "finished": True})
        self.assertEqual(self.r.xlen(parts[1]), 3, "replayed into its own partition")
        self.cli("dlq", "purge", self.q, "--yes")
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--partitions", "3",
                                 "--concurrency", "3", "--exit-when-idle", "1500"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(worker.returncode, 0, worker.stderr)
        stats = json.loads(self.cli("stats", self.q, "--format", "json").stdout)
        self.assertEqual((stats[0]["queue_length"], stats[0]["dlq_length"]), (0, 0), worker.stdout)
        self.assertEqual(len([line for line in worker.stdout.splitlines() if line.startswith("done")]), 7,
                         worker.stdout)

    def test_pause_and_resume(self):
        self.cli("pause", self.q)
        self.cli("enqueue", self.q, "send_email", "{}")
        queues = {q["name"]: q for q in json.loads(self.cli("queues", "--format", "json").stdout)}
        self.assertTrue(queues[self.q]["paused"])
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--exit-when-idle", "1000"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(self.r.xlen(self.q), 1, "a paused queue is not read: " + worker.stdout)
        self.cli("resume", self.q)
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--exit-when-idle", "1000"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(self.r.xlen(self.q), 0, worker.stdout + worker.stderr)

    def tenants(self, queue):
        """`streamq tenants list` in JSON: {tenant: its object}, and the tenants in the order listed."""
        listed = json.loads(self.cli("tenants", "list", queue, "--format", "json").stdout)["tenants"]
        return {t["tenant"]: t for t in listed}, [t["tenant"] for t in listed]

    def test_tenants_are_listed_with_their_backlogs_and_settings(self):
        for _ in range(3):
            self.cli("enqueue", self.q, "send_email", '{"to":"a@acme.test"}', "--tenant", "acme")
        self.cli("enqueue", self.q, "send_email", '{"to":"g@globex.test"}', "--tenant", "globex")
        lines = "".join(json.dumps({"type": "send_email", "payload": {"to": "i%d@initech.test" % i},
                                    "tenant": "initech"}) + "\n" for i in range(2))
        self.cli("enqueue", self.q, "--stdin", stdin=lines)
        self.assertEqual(self.r.xlen(self.q), 0, "a tenant's tasks wait in its backlog")
        self.assertEqual(self.r.llen(self.q + ":tenant:acme"), 3)
        # A queue whose tasks all wait in backlogs is a queue; a backlog is not one of its own.
        names = [q["name"] for q in json.loads(self.cli("queues", "--format", "json").stdout)]
        self.assertIn(self.q, names)
        self.assertEqual([n for n in names if ":tenant:" in n], [])

        tenants, order = self.tenants(self.q)
        self.assertEqual(order, ["acme", "initech", "globex"], "the largest backlog first")
        self.assertEqual(tenants["acme"], {"tenant": "acme", "partition": self.q, "backlog": 3, "running": 0,
                                           "paused": False, "weight": None, "concurrency": None,
                                           "rate_limit": None, "rate_per_ms": None, "max_len": None})
        self.assertEqual((tenants["initech"]["backlog"], tenants["globex"]["backlog"]), (2, 1))

        p = self.cli("tenants", "set", self.q, "acme", "--weight", "3", "--concurrency", "2", "--rate-limit", "50",
                     "--rate-per-ms", "1000", "--max-len", "5")
        self.assertEqual(p.stdout.strip(),
                         "tenant acme of %s: weight=3 concurrency=2 rate=50/1000ms max_len=5" % self.q)
        acme = self.tenants(self.q)[0]["acme"]
        self.assertEqual((acme["weight"], acme["concurrency"], acme["rate_limit"], acme["rate_per_ms"], acme["max_len"]),
                         (3, 2, 50, 1000, 5))
        rows = {line.split()[0]: line.split() for line in self.cli("tenants", "list", self.q).stdout.splitlines()}
        self.assertEqual(rows["TENANT"], ["TENANT", "PARTITION", "BACKLOG", "RUNNING", "PAUSED", "WEIGHT",
                                          "CONCURRENCY", "RATE", "MAX_LEN"])
        self.assertEqual(rows["acme"], ["acme", self.q, "3", "0", "no", "3", "2", "50/1.0", "s", "5"])
        self.assertEqual(rows["globex"], ["globex", self.q, "1", "0", "no", "-", "-", "-", "-"])

        # Its max_len holds: two more fit, the third is refused, naming the tenant; the others go on.
        for _ in range(2):
            self.cli("enqueue", self.q, "send_email", '{"to":"a@acme.test"}', "--tenant", "acme")
        full = self.cli("enqueue", self.q, "send_email", '{"to":"a@acme.test"}', "--tenant", "acme", check=False)
        self.assertEqual(full.returncode, 1, full.stderr)
        self.assertIn("tenant acme holds 5 tasks", full.stderr)
        self.cli("enqueue", self.q, "send_email", '{"to":"g@globex.test"}', "--tenant", "globex")

        # Every tenant's defaults: a tenant's own setting wins over them.
        p = self.cli("tenants", "defaults", self.q, "--max-len", "2", "--concurrency", "4")
        self.assertEqual(p.stdout.strip(), "defaults of every tenant of %s: concurrency=4 max_len=2" % self.q)
        self.assertEqual(self.r.hgetall(self.q + ":tenants:defaults"), {b"concurrency": b"4", b"max_len": b"2"})
        refused = self.cli("enqueue", self.q, "send_email", '{"to":"g@globex.test"}', "--tenant", "globex",
                           check=False)
        self.assertEqual(refused.returncode, 1, refused.stderr)
        self.assertIn("tenant globex holds 2 tasks", refused.stderr)

        # Paused, then cleared: its own settings go, its pause stays; resumed.
        self.assertEqual(self.cli("tenants", "pause", self.q, "acme").stdout.strip(),
                         "tenant acme of %s paused" % self.q)
        self.assertTrue(self.tenants(self.q)[0]["acme"]["paused"])
        self.assertIn(" yes ", self.cli("tenants", "list", self.q).stdout)
        self.cli("tenants", "clear", self.q, "acme")
        acme = self.tenants(self.q)[0]["acme"]
        self.assertEqual((acme["paused"], acme["weight"], acme["max_len"], acme["rate_limit"]), (True, None, None, None))
        self.assertEqual(self.cli("tenants", "resume", self.q, "acme").stdout.strip(),
                         "tenant acme of %s resumed" % self.q)
        self.assertFalse(self.tenants(self.q)[0]["acme"]["paused"])
        self.assertEqual(json.loads(self.cli("tenants", "list", "nobody", "--format", "json").stdout), {"tenants": []})

    def test_tasks_waiting_in_tenants_backlogs_are_listed_found_and_cancelled(self):
        lines = "".join(json.dumps({"type": "send_email", "payload": {"n": i}, "task_id": "acme-%d" % i,
                                    "tenant": "acme"}) + "\n" for i in range(3))
        lines += json.dumps({"type": "send_email", "payload": {}, "task_id": "globex-0", "tenant": "globex",
                             "priority": "high"}) + "\n"
        self.cli("enqueue", self.q, "--stdin", stdin=lines)
        page = json.loads(self.cli("tasks", self.q, "--state", "backlog", "--count", "3", "--format", "json").stdout)
        self.assertEqual([t["id"] for t in page["tasks"]], ["acme-0", "acme-1", "acme-2"])
        self.assertEqual({t["state"] for t in page["tasks"]}, {"backlog"})
        self.assertEqual(page["tasks"][0]["key"], self.q + ":tenant:acme")
        rest = json.loads(self.cli("tasks", self.q, "--state", "backlog", "--cursor", page["next_cursor"],
                                   "--format", "json").stdout)
        self.assertEqual([(t["id"], t["level"]) for t in rest["tasks"]], [("globex-0", "high")])
        table = self.cli("tasks", self.q, "--state", "backlog", "--level", "high").stdout
        self.assertIn("tenant globex", table)
        self.assertNotIn("acme", table)
        task = json.loads(self.cli("task", self.q, "acme-1", "--format", "json").stdout)
        self.assertEqual((task["state"], task["fields"]["streamq_tenant"]), ("backlog", "acme"))
        self.assertEqual(self.cli("cancel", self.q, "acme-1", "--yes", check=False).returncode, 0)
        self.assertEqual(self.r.llen(self.q + ":tenant:acme"), 2)
        self.assertEqual(self.cli("cancel", self.q, "acme-1", "--yes", check=False).returncode, 3)
        stats = json.loads(self.cli("stats", self.q, "--format", "json").stdout)
        self.assertEqual((stats[0]["backlog"], stats[0]["backlog_tenants"]), (3, 2))

    def test_bad_tenant_settings_are_refused_with_what_is_wrong(self):
        self.cli("enqueue", self.q, "send_email", '{"to":"a@acme.test"}', "--tenant", "acme")
        for args, message in ((["--weight", "0"], "a tenant's weight must be > 0 and <= 1,000,000"),
                              (["--weight", "2e6"], "a tenant's weight must be > 0 and <= 1,000,000"),
                              (["--concurrency", "-1"], "a tenant's concurrency must be >= 0"),
                              (["--max-len", "-5"], "a tenant's max_len must be >= 0"),
                              (["--rate-limit", "5", "--rate-per-ms", "0"], "a tenant's rate_per must be 1 ms to a year"),
                              (["--rate-limit", "5"], "--rate-limit requires --rate-per-ms"),
                              (["--weight", "heavy"], "--weight"),
                              ([], "nothing to set")):
            p = self.cli("tenants", "set", self.q, "acme", *args, check=False)
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertIn(message, p.stderr, args)
        p = self.cli("tenants", "set", self.q, "x" * 257, "--weight", "2", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("tenant must be 1 to 256 bytes", p.stderr)
        self.assertEqual(self.cli("tenants", "pause", self.q, check=False).returncode, 2, "the tenant is required")
        self.assertEqual(self.cli("tenants", "list", self.q, "--count", "0", check=False).returncode, 2)
        self.assertEqual(self.cli("tenants", check=False).returncode, 2)
        self.assertEqual(self.r.exists(self.q + ":tenants:config:acme"), 0, "nothing was written")

    def test_a_paused_tenant_waits_while_the_others_run(self):
        lines = "".join(json.dumps({"type": "send_email", "payload": {"to": "%s%d@example.com" % (t, i)},
                                    "tenant": t}) + "\n" for t in ("acme", "globex") for i in range(3))
        self.cli("enqueue", self.q, "--stdin", stdin=lines)
        self.cli("tenants", "pause", self.q, "globex")
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--exit-when-idle", "1500"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(worker.returncode, 0, worker.stderr)
        ran = [line for line in worker.stdout.splitlines() if line.startswith("done")]
        self.assertEqual(len(ran), 3, worker.stdout)
        self.assertTrue(all("@example.com" in line and "acme" in line for line in ran), ran)
        tenants, order = self.tenants(self.q)
        self.assertEqual(order, ["globex"])
        self.assertEqual((tenants["globex"]["backlog"], tenants["globex"]["paused"]), (3, True))
        self.cli("tenants", "resume", self.q, "globex")
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--exit-when-idle", "1500"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(len([line for line in worker.stdout.splitlines() if line.startswith("done")]), 3,
                         worker.stdout + worker.stderr)
        self.assertEqual(self.tenants(self.q), ({}, []))

    def test_doctor_explains_persistence_and_fails_on_what_loses_tasks(self):
        p = self.cli("doctor", check=False)
        self.assertEqual(p.returncode, 4, p.stdout)
        self.assertIn("[danger] persistence: appendonly is off", p.stdout)
        self.assertIn("maxmemory-policy", p.stdout)
        self.r.config_set("appendonly", "yes")
        try:
            wait_for(lambda: self.r.info("persistence")["aof_rewrite_in_progress"] == 0, what="AOF rewrite")
            p = self.cli("doctor", "--format", "json", check=False)
            findings = {f["topic"]: f for f in json.loads(p.stdout)}
            self.assertEqual(findings["persistence"]["severity"], "ok", findings["persistence"])
            self.assertEqual(p.returncode, 0, p.stdout)
        finally:
            self.r.config_set("appendonly", "no")

    def test_hostile_payloads_are_escaped_in_tables(self):
        self.r.xadd(self.q, {"task_id": "evil", "task_type": "t\x1b[2J", "payload": '"\x1b]0;pwned\x07<script>"'})
        out = self.cli("tasks", self.q).stdout
        self.assertNotIn("\x1b", out)
        self.assertNotIn("\x07", out)
        self.assertIn("\\x1b", out)

    def test_exporter_serves_metrics_the_prometheus_parser_accepts(self):
        self.cli("enqueue", self.q, "send_email", "{}")
        self.cli("enqueue", self.q + "-other", "send_email", "{}")
        self.r.xgroup_create(self.q, "workers", id="0")  # the per-group families need a group
        port = free_port()
        env = dict(os.environ, STREAMQ_URL=self.url)
        exporter = subprocess.Popen([CLI, "exporter", "--listen", "127.0.0.1:%d" % port], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            body = {}

            def scrape():
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
                        body["text"] = resp.read().decode()
                        body["type"] = resp.headers["Content-Type"]
                        return True
                except OSError:
                    return False
            wait_for(scrape, what="the exporter")
            self.assertTrue(body["type"].startswith("text/plain; version=0.0.4"))
            families = {f.name: f for f in text_string_to_metric_families(body["text"])}
            self.assertEqual(families["streamq_up"].samples[0].value, 1)
            self.assertIn("streamq_scrape_duration_seconds", families)
            lengths = {s.labels["stream"]: s.value for s in families["streamq_stream_length"].samples}
            self.assertEqual(lengths[self.q], 1)
            self.assertEqual(lengths[self.q + "-other"], 1)
            # Every metric the shipped alert rules and Grafana dashboard query is one the exporter serves.
            served = {s.name for f in families.values() for s in f.samples}
            ops = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "ops")
            with open(os.path.join(ops, "prometheus-alerts.yml")) as f:
                exprs = [r["expr"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
            with open(os.path.join(ops, "grafana-dashboard.json")) as f:
                exprs += [t["expr"] for p in json.load(f)["panels"] for t in p["targets"]]
            used = set(re.findall(r"streamq_[a-z_]+", " ".join(exprs)))
            self.assertGreaterEqual(len(used), 8)
            self.assertEqual(used - served, set())
            # Events of tracked tasks are counted from the first scrape on.
            self.cli("enqueue", self.q, "send_email", "{}", "--retention-ms", "1000")

            def enqueued():
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
                    fams = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
                if "streamq_events" not in fams:
                    return False
                return any(s.labels == {"stream": self.q, "event": "enqueued"} and s.value == 1
                           for s in fams["streamq_events"].samples)
            wait_for(enqueued, what="the enqueued event counted")
            # On a loopback address only its loopback names are answered: a page whose name was
            # made to resolve to 127.0.0.1 (DNS rebinding) cannot read the metrics.
            for host, expected in (("evil.example:%d" % port, 403), ("localhost:%d" % port, 200),
                                   ("127.0.0.1:%d" % (port + 1), 403)):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/metrics", headers={"Host": host})
                self.assertEqual(conn.getresponse().status, expected, host)
                conn.close()
        finally:
            exporter.send_signal(signal.SIGTERM)
            self.assertEqual(exporter.wait(10), 0, exporter.stderr.read())
            exporter.stderr.close()

    def exporter_families(self, *args):
        """Starts `streamq exporter` with `args` (stopped when the test ends) and gives its first scrape, parsed."""
        port = free_port()
        exporter = subprocess.Popen([CLI, "exporter", "--listen", "127.0.0.1:%d" % port, *args],
                                    env=dict(os.environ, STREAMQ_URL=self.url), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (exporter.send_signal(signal.SIGTERM), exporter.wait(10)))
        body = {}

        def scrape():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
                    body["text"] = resp.read().decode()
                    return True
            except OSError:
                return False
        wait_for(scrape, what="the exporter")
        return {f.name: f for f in text_string_to_metric_families(body["text"])}

    def test_exporter_shows_the_tenants_with_the_largest_backlogs(self):
        # Tenants t01..t12 with 1..12 tasks (t11 paused), and a queue without tenants.
        lines = "".join(json.dumps({"type": "send_email", "payload": {"to": "x@example.com"}, "tenant": "t%02d" % n})
                        + "\n" for n in range(1, 13) for _ in range(n))
        self.cli("enqueue", self.q + "-idle", "send_email", '{"to":"x@example.com"}')
        self.cli("tenants", "pause", self.q, "t11")
        self.cli("enqueue", self.q, "--stdin", stdin=lines)
        families = self.exporter_families("--top-tenants", "3")
        self.assertEqual({s.labels["stream"]: s.value for s in families["streamq_tenants"].samples
                          if s.labels["stream"].startswith(self.q)}, {self.q: 12, self.q + "-idle": 0})
        self.assertEqual({s.labels["tenant"]: s.value for s in families["streamq_tenant_backlog"].samples
                          if s.labels["stream"] == self.q}, {"t12": 12, "t11": 11, "t10": 10})
        self.assertEqual({s.labels["tenant"]: s.value for s in families["streamq_tenant_running"].samples
                          if s.labels["stream"] == self.q}, {"t12": 0, "t11": 0, "t10": 0})
        self.assertNotIn(self.q + "-idle", {s.labels["stream"] for s in families["streamq_tenant_backlog"].samples})
        self.assertIn("largest backlogs", families["streamq_tenant_backlog"].documentation)

        # A worker runs every task but the paused t11's and stops. Then the first task of t01 and of
        # t02 goes straight to the stream, holding a slot (nothing of its tenant ran or waited: its
        # turn at once): running 1 each, their other tasks in their backlogs.
        worker = subprocess.run([WORKER, "--url", self.url, "--stream", self.q, "--exit-when-idle", "1500"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(worker.returncode, 0, worker.stderr)
        for tenant, n in (("t01", 3), ("t02", 2)):
            for _ in range(n):
                self.cli("enqueue", self.q, "send_email", '{"to":"x@example.com"}', "--tenant", tenant)
        families = self.exporter_families("--top-tenants", "2")
        backlog = {s.labels["tenant"]: s.value for s in families["streamq_tenant_backlog"].samples
                   if s.labels["stream"] == self.q}
        running = {s.labels["tenant"]: s.value for s in families["streamq_tenant_running"].samples
                   if s.labels["stream"] == self.q}
        self.assertEqual(backlog, {"t11": 11, "t01": 2})
        self.assertEqual(running, {"t11": 0, "t01": 1})
        self.assertEqual([s.value for s in families["streamq_tenants"].samples if s.labels["stream"] == self.q], [3])

        families = self.exporter_families("--top-tenants", "0")
        self.assertFalse({"streamq_tenants", "streamq_tenant_backlog", "streamq_tenant_running"} & set(families))
        self.assertIn("streamq_stream_length", families)


if __name__ == "__main__":
    unittest.main()
