# SPDX-License-Identifier: MIT
"""`streamq schedules` (a queue's stored schedules) and the exporter's schedule gauges, driven as
an operator would, with the scheduling worker example (a Scheduler and a Consumer) running the
schedules. The test class starts its own redis-server on a free loopback port and stops only
that process.

Run by ctest with STREAMQ_CLI (bin/streamq) and STREAMQ_SCHEDULING_WORKER (the example) set."""
import json
import os
import re
import signal
import subprocess
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from harness import CLI, RedisTestCase, free_port, wait_for

SCHEDULING_WORKER = os.environ["STREAMQ_SCHEDULING_WORKER"]
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


class SchedulesTest(RedisTestCase):
    def setUp(self):
        self.q = "sched-" + self._testMethodName

    def listed(self, *args):
        """`streamq schedules list` in JSON: {name: its object}."""
        out = self.cli("schedules", "list", self.q, "--format", "json", *args).stdout
        return {s["name"]: s for s in json.loads(out)}

    def start_worker(self):
        """The scheduling worker on this queue (its code's heartbeat every 3600 s), stopped when the test ends."""
        worker = subprocess.Popen([SCHEDULING_WORKER, "--url", self.url, "--stream", self.q, "--every", "3600"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (worker.send_signal(signal.SIGTERM), worker.wait(20)))
        return worker

    def test_upsert_list_show_and_the_ticks_a_scheduler_runs(self):
        p = self.cli("schedules", "upsert", self.q, "report", "--schedule", "0 9 * * mon-fri Europe/Berlin",
                     "--type", "generate_pdf", "--payload", '{"report_type":"sales"}', "--priority", "high",
                     "--max-retries", "2", "--overlap", "skip", "--jitter-ms", "500",
                     "--start", "2026-01-05T00:00:00+01:00", "--end", "2099-12-31T23:59:59Z")
        self.assertEqual(p.stdout.strip(), "schedule report of %s created" % self.q)
        again = self.cli("schedules", "upsert", self.q, "report", "--schedule", "0 9 * * mon-fri Europe/Berlin",
                         "--type", "generate_pdf", "--payload", '{"report_type":"sales"}', "--priority", "high",
                         "--max-retries", "2", "--overlap", "skip", "--jitter-ms", "500",
                         "--start", "2026-01-05T00:00:00+01:00", "--end", "2099-12-31T23:59:59Z", "--format", "json")
        self.assertEqual(json.loads(again.stdout), {"schedule": "report", "outcome": "unchanged"})
        self.cli("schedules", "upsert", self.q, "tick", "--schedule", "every 1000ms", "--type", "ping")

        report = self.listed()["report"]
        self.assertEqual((report["schedule"], report["task_type"], report["payload"], report["from_code"],
                          report["paused"], report["last_tick"]),
                         ("0 9 * * mon-fri Europe/Berlin", "generate_pdf", '{"report_type":"sales"}', False, False, None))
        self.assertEqual(report["options"]["priority"], "high")
        self.assertEqual(report["options"]["max_retries"], 2)
        self.assertEqual(report["options"]["overlap"], "skip")
        self.assertEqual(report["options"]["jitter_ms"], 500)
        self.assertEqual(report["options"]["start"], "2026-01-04T23:00:00Z")
        self.assertEqual(report["options"]["end"], "2099-12-31T23:59:59Z")
        self.assertEqual(len(report["next_ticks"]), 3)
        # 09:00 in Berlin is 07:00 or 08:00 UTC, on weekdays only.
        for t in report["next_ticks"]:
            self.assertRegex(t, r"T0[78]:00:00Z$")

        # A Scheduler runs the stored schedules beside its code's: "tick" ticks every second.
        self.start_worker()
        wait_for(lambda: self.listed()["tick"]["last_outcome"] == "enqueued", timeout=30, what="a tick enqueued")
        listed = self.listed()
        tick = listed["tick"]
        self.assertEqual(tick["last_task_id"], "tick@" + tick["last_tick"])
        # (Its task went to the queue's stream, where the worker's consumer takes it.)
        self.assertGreaterEqual(tick["enqueued"], 1)
        self.assertNotEqual(self.r.xinfo_stream(self.q)["last-generated-id"], b"0-0")
        self.assertTrue(listed["heartbeat"]["from_code"])
        self.assertFalse(tick["from_code"])

        table = self.cli("schedules", "list", self.q).stdout
        row = next(line for line in table.splitlines() if line.startswith("tick "))
        self.assertRegex(row, r"every 1000ms +ping +running +api +%s, %s, %s +%s enqueued tick@" % (ISO, ISO, ISO, ISO))
        heartbeat = next(line for line in table.splitlines() if line.startswith("heartbeat "))
        self.assertIn(" code ", heartbeat)

        shown = self.cli("schedules", "show", self.q, "report", "--next", "5").stdout
        self.assertEqual(len(re.findall(r"^next tick +%s$" % ISO, shown, re.M)), 5, shown)
        self.assertRegex(shown, r"(?m)^overlap +skip$")
        self.assertEqual(json.loads(self.cli("schedules", "show", self.q, "report", "--format", "json").stdout)["name"],
                         "report")

    def test_pause_with_a_note_stops_the_ticks_and_resume_starts_them(self):
        self.cli("schedules", "upsert", self.q, "tick", "--schedule", "every 1000ms", "--type", "ping")
        self.start_worker()
        wait_for(lambda: self.listed()["tick"]["enqueued"] >= 1, timeout=30, what="a tick enqueued")
        p = self.cli("schedules", "pause", self.q, "tick", "--note", "maintenance until 10:00 (ops)")
        self.assertEqual(p.stdout.strip(), "schedule tick of %s paused" % self.q)
        tick = self.listed()["tick"]
        self.assertEqual((tick["paused"], tick["note"], tick["next_ticks"]),
                         (True, "maintenance until 10:00 (ops)", []))
        self.assertIn("paused: maintenance until 10:00 (ops)", self.cli("schedules", "list", self.q).stdout)
        # Once the running Scheduler has seen the pause (within a second), no more ticks.
        settled = self.r.time()[0] + 2
        wait_for(lambda: self.r.time()[0] >= settled, what="two seconds of the server's clock")
        before = self.listed()["tick"]["enqueued"]
        later = self.r.time()[0] + 3
        wait_for(lambda: self.r.time()[0] >= later, what="three seconds of the server's clock")
        self.assertEqual(self.listed()["tick"]["enqueued"], before, "a paused schedule ticked")

        self.cli("schedules", "resume", self.q, "tick")
        tick = self.listed()["tick"]
        self.assertEqual((tick["paused"], tick["note"], len(tick["next_ticks"])), (False, "", 3))
        # The version counts changes of the definition, not pauses (ScheduleInfo::version).
        self.assertEqual(tick["version"], 1)
        self.cli("schedules", "upsert", self.q, "tick", "--schedule", "every 2000ms", "--type", "ping")
        self.assertEqual(self.listed()["tick"]["version"], 2)
        wait_for(lambda: self.listed()["tick"]["enqueued"] > before, timeout=30, what="ticks again after resume")

    def test_remove_and_no_such_schedule(self):
        self.cli("schedules", "upsert", self.q, "tick", "--schedule", "*/5 * * * *", "--type", "ping")
        self.assertEqual(self.cli("schedules", "remove", self.q, "tick").stdout.strip(),
                         "schedule tick of %s removed" % self.q)
        self.assertEqual(self.listed(), {})
        for args in (("show", self.q, "tick"), ("pause", self.q, "tick"), ("resume", self.q, "tick"),
                     ("remove", self.q, "tick")):
            p = self.cli("schedules", *args, check=False)
            self.assertEqual(p.returncode, 3, args)
            self.assertIn("no schedule tick in " + self.q, p.stderr)
        # Bad arguments: nothing stored.
        for bad, message in ((["--schedule", "0 9 * *"], ""), (["--schedule", "every 5"], ""),
                             (["--schedule", "* * * * *", "--payload", "not json"], ""),
                             (["--schedule", "* * * * *", "--start", "2027-01-07T09:00:00"], "ISO 8601"),
                             (["--schedule", "* * * * *", "--overlap", "sometimes"], "")):
            p = self.cli("schedules", "upsert", self.q, "bad", "--type", "ping", *bad, check=False)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn(message, p.stderr)
        self.assertEqual(self.listed(), {})

    def test_a_partitioned_queue_is_found_without_its_partition_count(self):
        self.cli("enqueue", self.q, "--stdin", "--partitions", "3",
                 stdin="".join('{"type":"t"}\n' for _ in range(3)))
        names = ["s%d" % i for i in range(6)]
        for name in names:
            self.cli("schedules", "upsert", self.q, name, "--schedule", "*/5 * * * *", "--type", "ping",
                     "--partitions", "3")
        self.assertEqual(sorted(self.listed()), names, "found as streamq queues finds the partitions")
        # The records are in the partitions the names choose (more than one of the three).
        records = {k.decode() for k in self.r.scan_iter(match="{%s:*}:sched:*" % self.q)}
        self.assertEqual(len(records), 6, records)
        self.assertGreater(len({k.split(":sched:")[0] for k in records}), 1, records)
        self.assertEqual(self.cli("schedules", "pause", self.q, "s4").returncode, 0)
        self.assertTrue(self.listed("--partitions", "3")["s4"]["paused"])
        self.assertEqual(self.listed("--partitions", "1"), {}, "a queue of one stream has none of them")

    def scrape(self):
        """Starts `streamq exporter` (stopped when the test ends) and gives its first scrape, parsed."""
        port = free_port()
        exporter = subprocess.Popen([CLI, "exporter", "--listen", "127.0.0.1:%d" % port],
                                    env=dict(os.environ, STREAMQ_URL=self.url), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (exporter.send_signal(signal.SIGTERM), exporter.wait(10)))
        body = {}

        def scraped():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
                    body["text"] = resp.read().decode()
                    return True
            except OSError:
                return False
        wait_for(scraped, what="the exporter")
        return {f.name: f for f in text_string_to_metric_families(body["text"])}

    def test_exporter_says_how_long_ago_each_schedule_ticked(self):
        self.cli("enqueue", self.q, "t")  # a queue the exporter finds
        for name in ("nightly", "fresh"):
            self.cli("schedules", "upsert", self.q, name, "--schedule", "0 3 * * *", "--type", "ping")
        self.cli("schedules", "pause", self.q, "fresh", "--note", "test")
        # A Scheduler recorded nightly's last tick an hour ago (the record's tick field, ms).
        now_ms = int(self.r.time()[0]) * 1000
        self.r.hset(self.q + ":sched:nightly", mapping={"tick": now_ms - 3600 * 1000, "outcome": "enqueued"})
        families = self.scrape()
        since = {s.labels["schedule"]: s.value for s in families["streamq_schedule_seconds_since_last_tick"].samples
                 if s.labels["stream"] == self.q}
        self.assertEqual(set(since), {"nightly", "fresh"})
        self.assertGreaterEqual(since["nightly"], 3600)
        self.assertLess(since["nightly"], 3600 + 60)
        self.assertGreaterEqual(since["fresh"], 0, "not ticked yet: since it was stored")
        self.assertLess(since["fresh"], 60)
        paused = {s.labels["schedule"]: s.value for s in families["streamq_schedule_paused"].samples
                  if s.labels["stream"] == self.q}
        self.assertEqual(paused, {"nightly": 0, "fresh": 1})


if __name__ == "__main__":
    import unittest
    unittest.main()
