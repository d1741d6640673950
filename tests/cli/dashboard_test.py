# SPDX-License-Identifier: MIT
"""`streamq dashboard` in a real browser (Debian's chromium, driven headless through
chromedriver by Selenium), and its access rules over plain HTTP. The test class starts its own
redis-server, dashboards and browser, and stops only those.

Run by ctest with STREAMQ_CLI (bin/streamq) set; STREAMQ_SCREENSHOT, when set, is where the
browser test saves its screenshot of the queue page."""
import json
import os
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import CLI, RedisTestCase, free_port, wait_for

CHROMIUM = os.environ.get("STREAMQ_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("STREAMQ_CHROMEDRIVER", "/usr/bin/chromedriver")
XSS = '{"note":"<script>window.__xss = 1</script><img src=x onerror=\\"window.__xss = 2\\">"}'


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def http(url, method="GET", body=None, headers=None):
    """(status, headers, body text) without following redirects."""
    req = urllib.request.Request(url, data=body.encode() if body is not None else None, method=method,
                                 headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as res:
            return res.status, res.headers, res.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


class DashboardTest(RedisTestCase):
    def start_dashboard(self, *args):
        """Starts a dashboard (on a free loopback port, with --no-auth, unless told otherwise);
        returns its base URL."""
        if not args:
            args = ("--no-auth",)
        return self.start_dashboard_logged(*args)[0]

    def start_dashboard_logged(self, *args):
        """start_dashboard(args as given), and the path of its log (its stderr)."""
        port = free_port()
        env = dict(os.environ, STREAMQ_URL=self.url)
        listen = args[0] if args and not args[0].startswith("--") else "127.0.0.1:%d" % port
        rest = args[1:] if args and not args[0].startswith("--") else args
        log_path = os.path.join(self.dir, "dashboard-%d.log" % port)
        log = open(log_path, "w")
        p = subprocess.Popen([CLI, "dashboard", "--listen", listen, "--sample-interval", "0.5", *rest], env=env,
                             stdout=subprocess.DEVNULL, stderr=log)
        self.addCleanup(lambda: (p.terminate(), p.wait(10), log.close()))
        base = "http://%s" % listen

        def up():
            try:
                http(base + "/static/style.css")
                return True
            except OSError:
                return False
        wait_for(up, what="the dashboard")
        return base, log_path

    def stats(self, queue):
        return json.loads(self.cli("stats", queue, "--format", "json").stdout)[0]

    def test_access_rules(self):
        q = "web-access"
        self.cli("enqueue", q, "ping")
        base = self.start_dashboard()
        self.r.xgroup_create(q + ":p:high", "workers", id="0", mkstream=True)  # as a worker makes it
        status, _, text = http(base + "/api/queues")
        self.assertEqual(status, 200)
        listed = {x["name"]: x for x in json.loads(text)["queues"]}
        self.assertEqual(listed[q]["partitions"], 1, "a queue of one stream is one partition")
        self.assertEqual(listed[q]["levels"], ["high", "normal"], "an empty level stream is a level")
        # No action answers a GET.
        for action in ("replay", "delete", "run_now", "cancel", "pause", "resume"):
            status, headers, _ = http(base + "/api/" + action)
            self.assertEqual(status, 405, action)
            self.assertEqual(headers["Allow"], "POST")
        # A POST without the page's CSRF token, with a wrong one, or from another origin.
        page = http(base + "/queue?name=" + q)[2]
        csrf = page.split('name="csrf-token" content="')[1].split('"')[0]
        self.assertRegex(csrf, "^[0-9a-f]{64}$")
        body = json.dumps({"queue": q})
        cases = [({"Content-Type": "application/json"}, 403),
                 ({"Content-Type": "application/json", "X-CSRF-Token": "0" * 64}, 403),
                 ({"Content-Type": "application/json", "X-CSRF-Token": csrf, "Origin": "http://evil.example"}, 403),
                 ({"Content-Type": "application/json", "X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"}, 403),
                 ({"Content-Type": "text/plain", "X-CSRF-Token": csrf}, 415)]
        for headers, expected in cases:
            self.assertEqual(http(base + "/api/pause", "POST", body, headers)[0], expected, headers)
        self.assertEqual(self.r.exists(q + ":paused"), 0)
        good = {"Content-Type": "application/json", "X-CSRF-Token": csrf}
        self.assertEqual(http(base + "/api/pause", "POST", body, good)[0], 200)
        self.assertEqual(self.r.exists(q + ":paused"), 1)
        # Bad bodies are refused, and nothing is replayed or deleted by an empty list.
        self.add_dead(q, 2)
        for path, sent, message in (
                ("/api/resume", {"queue": 7}, '"queue" must be a non-empty string'),
                ("/api/replay", {"queue": q}, '"all": true'),
                ("/api/replay", {"queue": q, "ids": []}, '"ids" must be an array of 1 to 10,000'),
                ("/api/replay", {"queue": q, "all": "yes"}, '"all" must be true or false'),
                ("/api/delete", {"queue": q}, '"ids" must list'),
                ("/api/delete", {"queue": q, "ids": [1]}, '"ids" must hold strings')):
            status, _, text = http(base + path, "POST", json.dumps(sent), good)
            self.assertEqual(status, 400, sent)
            self.assertIn(message, json.loads(text)["error"])
        self.assertEqual(self.r.xlen(q + ":dlq"), 2)
        status, _, text = http(base + "/api/replay", "POST", json.dumps({"queue": q, "all": True}), good)
        self.assertEqual((status, json.loads(text)["done"]), (200, 2))
        # A queued task cancelled by its task id; then it is missing.
        doomed = self.cli("enqueue", q, "ping").stdout.strip()
        before = self.r.xlen(q)
        for expected in ("cancelled", "missing"):
            status, _, text = http(base + "/api/cancel", "POST", json.dumps({"queue": q, "id": doomed}), good)
            self.assertEqual((status, json.loads(text)["outcome"]), (200, expected))
        self.assertEqual(self.r.xlen(q), before - 1)
        # A tracked task's record, by its task id.
        tracked = self.cli("enqueue", q, "ping", "--retention-ms", "60000").stdout.strip()
        status, _, text = http(base + "/api/record?name=%s&id=%s" % (q, tracked))
        self.assertEqual((status, json.loads(text)["record"]["state"]), (200, "queued"))
        self.assertIsNone(json.loads(http(base + "/api/record?name=%s&id=nothing" % q)[2])["record"])
        # A name that resolved to 127.0.0.1 (DNS rebinding) is not this dashboard's host.
        self.assertEqual(http(base + "/api/queues", headers={"Host": "evil.example:80"})[0], 403)
        # An error that quotes bytes that are not UTF-8 is still a 400 with a JSON body.
        status, _, text = http(base + "/api/tasks?name=" + q + "&state=queued&cursor=%FF")
        self.assertEqual(status, 400, text)
        self.assertIn("error", json.loads(text))

        # Any other address needs a token (--no-auth is for loopback); a short one is refused.
        env = dict(os.environ, STREAMQ_URL=self.url)
        for host, extra, message in (("0.0.0.0", ["--no-auth"], "not a loopback address"),
                                     ("127.0.0.1.example.com", ["--no-auth"], "not a loopback address"),
                                     ("127.0.0.1", ["--no-auth", "--token", "t0ken-" + "z" * 20], "not both"),
                                     ("0.0.0.0", ["--token", "short"], "16 to 256 characters")):
            p = subprocess.run([CLI, "dashboard", "--listen", "%s:%d" % (host, free_port()), *extra], env=env,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(message, p.stderr)
        # A token file whose first line is empty is a mistake, not "no token", even on loopback.
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write("\n" + "t0ken-" + "y" * 20 + "\n")
            f.flush()
            p = subprocess.run([CLI, "dashboard", "--listen", "127.0.0.1:%d" % free_port(), "--token-file", f.name],
                               env=env, capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("holds no token", p.stderr)

        token = "t0ken-" + "x" * 20
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write(token + "\n")
            f.flush()
            base = self.start_dashboard("0.0.0.0:%d" % free_port(), "--token-file", f.name)
            base = base.replace("0.0.0.0", "127.0.0.1")
            self.assertEqual(http(base + "/api/queues")[0], 401)
            status, headers, _ = http(base + "/")
            self.assertEqual((status, headers["Location"]), (303, "/login"))
            self.assertEqual(http(base + "/api/queues", headers={"Authorization": "Bearer wrong"})[0], 401)
            self.assertEqual(http(base + "/api/queues", headers={"Authorization": "Bearer " + token})[0], 200)
            form = {"Content-Type": "application/x-www-form-urlencoded"}
            self.assertEqual(http(base + "/login", "POST", "token=wrong", form)[0], 401)
            status, headers, _ = http(base + "/login", "POST", "token=" + token, form)
            self.assertEqual(status, 303)
            cookie = headers["Set-Cookie"].split(";")[0]
            self.assertIn("HttpOnly", headers["Set-Cookie"])
            self.assertIn("SameSite=Strict", headers["Set-Cookie"])
            # The cookie is a session of this dashboard (its port in the name), not the token.
            name, _, session = cookie.partition("=")
            self.assertEqual(name, "streamq_dashboard_" + base.rsplit(":", 1)[1])
            self.assertNotIn(token, cookie)
            self.assertEqual(http(base + "/", headers={"Cookie": cookie})[0], 200)
            # One set by another page of the host first does not hide it; a made-up one is refused.
            self.assertEqual(http(base + "/", headers={"Cookie": name + "=x; " + cookie})[0], 200)
            self.assertEqual(http(base + "/api/queues", headers={"Cookie": name + "=" + "0" * 64})[0], 401)
            # The token replaces the Host check: any name reaches it, but only with the token.
            self.assertEqual(http(base + "/api/queues", headers={"Host": "queue-box:1", "Cookie": cookie})[0], 200)

    def test_tenants_and_their_actions_under_the_rules_of_pause(self):
        q = "web-tenants"
        for tenant, n in (("acme", 2), ("globex", 1)):
            for _ in range(n):
                self.cli("enqueue", q, "ping", "--tenant", tenant)
        self.cli("tenants", "set", q, "globex", "--concurrency", "3", "--rate-limit", "10", "--rate-per-ms", "60000")
        token = "t0ken-" + "w" * 20
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write(token + "\n")
            f.flush()
            base = self.start_dashboard("127.0.0.1:%d" % free_port(), "--token-file", f.name)
        bearer = {"Authorization": "Bearer " + token}

        def tenants(query="name=" + q):
            status, _, text = http(base + "/api/tenants?" + query, headers=bearer)
            self.assertEqual(status, 200, text)
            return json.loads(text)["tenants"]
        self.assertEqual(http(base + "/api/tenants?name=" + q)[0], 401)
        listed = tenants()
        self.assertEqual([(t["tenant"], t["backlog"], t["running"], t["paused"]) for t in listed],
                         [("acme", 2, 0, False), ("globex", 1, 0, False)])
        self.assertEqual((listed[1]["concurrency"], listed[1]["rate_limit"], listed[1]["rate_per_ms"],
                          listed[1]["weight"]), (3, 10, 60000, None))
        self.assertEqual(len(tenants("name=%s&count=1" % q)), 1, "count: looked at per partition")
        for query, message in (("name=%s&count=0" % q, "count must be 1 to 10000"), ("count=5", "missing parameter name")):
            status, _, text = http(base + "/api/tenants?" + query, headers=bearer)
            self.assertEqual((status, json.loads(text)["error"]), (400, message))

        # The tenants' actions answer every request that breaks a rule as /api/pause does.
        page = http(base + "/queue?name=" + q, headers=bearer)[2]
        csrf = page.split('name="csrf-token" content="')[1].split('"')[0]
        body = json.dumps({"queue": q, "tenant": "acme"})
        good = dict(bearer, **{"Content-Type": "application/json", "X-CSRF-Token": csrf})
        cases = [("POST", {"Content-Type": "application/json", "X-CSRF-Token": csrf}, 401),
                 ("POST", dict(bearer, **{"Content-Type": "application/json"}), 403),
                 ("POST", dict(good, **{"X-CSRF-Token": "0" * 64}), 403),
                 ("POST", dict(good, Origin="http://evil.example"), 403),
                 ("POST", dict(good, **{"Sec-Fetch-Site": "cross-site"}), 403),
                 ("POST", dict(good, **{"Content-Type": "text/plain"}), 415),
                 ("GET", bearer, 405)]
        for method, headers, expected in cases:
            for path in ("/api/pause", "/api/tenant/pause", "/api/tenant/resume"):
                status, _, text = http(base + path, method, body if method == "POST" else None, headers)
                self.assertEqual(status, expected, (path, method, headers))
                self.assertIn("error", json.loads(text))
        self.assertEqual(self.r.exists(q + ":paused"), 0)
        self.assertEqual(self.r.hget(q + ":tenants:config:acme", "paused"), None)
        self.assertFalse(any(t["paused"] for t in tenants()))

        # With the token and the page's CSRF token: paused, then resumed, as the listing shows.
        status, _, text = http(base + "/api/tenant/pause", "POST", body, good)
        self.assertEqual((status, json.loads(text)), (200, {"tenant": "acme", "paused": True}))
        self.assertEqual([(t["tenant"], t["paused"]) for t in tenants()], [("acme", True), ("globex", False)])
        self.assertEqual(self.r.hget(q + ":tenants:config:acme", "paused"), b"1")
        self.assertEqual(self.r.exists(q + ":paused"), 0, "the queue itself is not paused")
        status, _, text = http(base + "/api/tenant/resume", "POST", body, good)
        self.assertEqual((status, json.loads(text)), (200, {"tenant": "acme", "paused": False}))
        self.assertEqual([(t["tenant"], t["paused"]) for t in tenants()], [("acme", False), ("globex", False)])
        for sent, message in (({"queue": q}, '"tenant" must be a non-empty string'),
                              ({"tenant": "acme"}, '"queue" must be a non-empty string'),
                              ({"queue": q, "tenant": "x" * 257}, "tenant must be 1 to 256 bytes")):
            status, _, text = http(base + "/api/tenant/pause", "POST", json.dumps(sent), good)
            self.assertEqual(status, 400, sent)
            self.assertIn(message, json.loads(text)["error"])
        self.assertEqual(self.r.hget(q + ":tenants:config:acme", "paused"), None)

    def test_schedules_and_their_actions_under_the_rules_of_pause(self):
        q = "web-schedules"
        self.cli("enqueue", q, "ping")
        self.cli("schedules", "upsert", q, "report", "--schedule", "0 9 * * mon-fri Europe/Berlin", "--type", "pdf")
        self.cli("schedules", "upsert", q, "tick", "--schedule", "every 60000ms", "--type", "ping")
        self.r.hset(q + ":sched:tick", mapping={"tick": "1796000000000", "outcome": "enqueued",
                                                "task_id": "tick@2026-11-30T00:53:20Z"})
        token = "t0ken-" + "v" * 20
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write(token + "\n")
            f.flush()
            base = self.start_dashboard("127.0.0.1:%d" % free_port(), "--token-file", f.name)
        bearer = {"Authorization": "Bearer " + token}

        def schedules():
            status, _, text = http(base + "/api/schedules?name=" + q, headers=bearer)
            self.assertEqual(status, 200, text)
            return {s["name"]: s for s in json.loads(text)["schedules"]}
        self.assertEqual(http(base + "/api/schedules?name=" + q)[0], 401)
        listed = schedules()
        self.assertEqual(sorted(listed), ["report", "tick"])
        self.assertEqual((listed["tick"]["last_tick"], listed["tick"]["last_outcome"], listed["tick"]["last_task_id"]),
                         ("2026-11-30T00:53:20Z", "enqueued", "tick@2026-11-30T00:53:20Z"))
        self.assertEqual(len(listed["report"]["next_ticks"]), 3)
        self.assertEqual((listed["report"]["paused"], listed["report"]["from_code"]), (False, False))
        status, _, text = http(base + "/api/schedules", headers=bearer)
        self.assertEqual((status, json.loads(text)["error"]), (400, "missing parameter name"))

        # Pause and resume answer every request that breaks a rule as /api/pause does.
        page = http(base + "/queue?name=" + q, headers=bearer)[2]
        csrf = page.split('name="csrf-token" content="')[1].split('"')[0]
        body = json.dumps({"queue": q, "schedule": "report", "note": "holidays (ops)"})
        good = dict(bearer, **{"Content-Type": "application/json", "X-CSRF-Token": csrf})
        cases = [("POST", {"Content-Type": "application/json", "X-CSRF-Token": csrf}, 401),
                 ("POST", dict(bearer, **{"Content-Type": "application/json"}), 403),
                 ("POST", dict(good, **{"X-CSRF-Token": "0" * 64}), 403),
                 ("POST", dict(good, Origin="http://evil.example"), 403),
                 ("POST", dict(good, **{"Sec-Fetch-Site": "cross-site"}), 403),
                 ("POST", dict(good, **{"Content-Type": "text/plain"}), 415),
                 ("GET", bearer, 405)]
        for method, headers, expected in cases:
            for path in ("/api/pause", "/api/schedule/pause", "/api/schedule/resume"):
                status, _, text = http(base + path, method, body if method == "POST" else None, headers)
                self.assertEqual(status, expected, (path, method, headers))
                self.assertIn("error", json.loads(text))
        self.assertFalse(any(s["paused"] for s in schedules().values()))
        self.assertEqual(self.r.hget(q + ":sched:report", "paused"), None)

        # With the token and the page's CSRF token: paused with its note, then resumed.
        status, _, text = http(base + "/api/schedule/pause", "POST", body, good)
        self.assertEqual((status, json.loads(text)), (200, {"schedule": "report", "paused": True}))
        report = schedules()["report"]
        self.assertEqual((report["paused"], report["note"], report["next_ticks"]), (True, "holidays (ops)", []))
        self.assertFalse(schedules()["tick"]["paused"])
        status, _, text = http(base + "/api/schedule/resume", "POST", body, good)
        self.assertEqual((status, json.loads(text)), (200, {"schedule": "report", "paused": False}))
        self.assertEqual((schedules()["report"]["paused"], schedules()["report"]["note"]), (False, ""))
        for sent, expected, message in (
                ({"queue": q, "schedule": "nothing"}, 404, "no schedule nothing in " + q),
                ({"queue": q}, 400, '"schedule" must be a non-empty string'),
                ({"schedule": "report"}, 400, '"queue" must be a non-empty string'),
                ({"queue": q, "schedule": "report", "note": 7}, 400, '"note" must be a string'),
                ({"queue": q, "schedule": "report", "note": "x" * 1001}, 400, '"note" must be a string')):
            status, _, text = http(base + "/api/schedule/pause", "POST", json.dumps(sent), good)
            self.assertEqual(status, expected, sent)
            self.assertIn(message, json.loads(text)["error"])
        self.assertFalse(schedules()["report"]["paused"])

    def test_the_api_shows_a_task_and_a_batch(self):
        q = "web-api"
        base = self.start_dashboard()
        self.cli("enqueue", q, "resize", '{"image":1}', "--task-id", "t-1", "--retention-ms", "60000")
        self.r.hset(q + ":batches:nightly", mapping={"state": "closed", "total": "5", "done": "3", "failed": "1"})

        def get(path):
            status, _, text = http(base + path)
            return status, json.loads(text)
        status, body = get("/api/batch?name=%s&id=nightly" % q)
        self.assertEqual(status, 200)
        self.assertEqual(body, {"batch": {"batch_id": "nightly", "state": "closed", "total": 5, "done": 3,
                                          "failed": 1, "pending": 1, "parent_batch": ""}})
        self.assertEqual(get("/api/batch?name=%s&id=nothing" % q), (200, {"batch": None}))
        status, body = get("/api/task?name=%s&id=t-1" % q)
        self.assertEqual(status, 200)
        self.assertEqual((body["task"]["state"], body["task"]["fields"]["task_id"]), ("queued", "t-1"))
        self.assertEqual(body["record"]["state"], "queued")
        self.assertNotIn("flow", body)
        self.assertEqual(get("/api/task?name=%s&id=nothing" % q), (200, {"task": None, "record": None}))
        for path in ("/api/task?name=" + q, "/api/batch?id=nightly"):
            status, body = get(path)
            self.assertEqual(status, 400, path)
            self.assertIn("missing parameter", body["error"])

    def test_a_token_of_its_own_by_default(self):
        # Without --token or --no-auth a dashboard makes up a token and prints it once, in the
        # URL that logs in: another local process cannot use it without reading that.
        base, log_path = self.start_dashboard_logged("127.0.0.1:%d" % free_port())
        with open(log_path) as f:
            printed = f.read()
        url = printed.split("serving ", 1)[1].split()[0]
        self.assertTrue(url.startswith(base + "/?token="), printed)
        token = url.split("?token=", 1)[1]
        self.assertRegex(token, "^[0-9a-f]{32}$")
        self.assertEqual(http(base + "/api/queues")[0], 401)
        self.assertEqual(http(base + "/")[1]["Location"], "/login")
        self.assertEqual(http(base + "/?token=" + "0" * 32)[1]["Location"], "/login")
        status, headers, _ = http(url)
        self.assertEqual((status, headers["Location"]), (303, "/"))  # the token leaves the address bar
        cookie = headers["Set-Cookie"].split(";")[0]
        self.assertNotIn(token, cookie)
        self.assertEqual(http(base + "/api/queues", headers={"Cookie": cookie})[0], 200)
        self.assertEqual(http(base + "/api/queues", headers={"Authorization": "Bearer " + token})[0], 200)
        # A second dashboard makes up another token.
        _, second_log = self.start_dashboard_logged("127.0.0.1:%d" % free_port())
        with open(second_log) as f:
            self.assertNotIn(token, f.read())

    def test_throughput_series(self):
        # The rates between samples add up to what happened: 6 tasks done, 2 dead-lettered.
        q = "web-rates"
        for i in range(10):
            self.cli("enqueue", q, "resize", '{"image":%d}' % i)
        base = self.start_dashboard()

        def series():
            return json.loads(http(base + "/api/queue?name=" + q)[2])["series"]
        wait_for(lambda: len(series()["t_ms"]) >= 2, what="two samples")
        entries = [i for i, _ in self.r.xrange(q)]
        self.r.xdel(q, *entries[:6])  # done: acknowledged and deleted, as a worker does
        # The levels a worker creates (XGROUP CREATE … MKSTREAM), empty, do not hide the counts.
        for level in (q + ":p:high", q + ":p:low"):
            self.r.xgroup_create(level, "workers", id="0", mkstream=True)
        for i, fields in self.r.xrange(q, entries[6], entries[7]):  # failed for good, as one script does it
            with self.r.pipeline(transaction=True) as p:
                p.xadd(q + ":dlq", dict(fields, error=b"boom", reason=b"max_retries"))
                p.xdel(q, i)
                p.execute()
        changed = int(self.r.time()[0]) * 1000
        wait_for(lambda: series()["t_ms"][-1] > changed + 1000, what="samples after the change")
        s = series()
        if int(self.r.info("server")["redis_version"].split(".")[0]) >= 7:
            def total(key):
                return sum(r * (t1 - t0) / 1000 for r, t0, t1 in zip(s[key][1:], s["t_ms"], s["t_ms"][1:])
                           if r is not None)
            self.assertAlmostEqual(total("done_per_s"), 6, places=6)
            self.assertAlmostEqual(total("dead_per_s"), 2, places=6)
        else:  # no entries-added before Redis 7.0: no rates rather than wrong ones
            self.assertTrue(all(r is None for r in s["done_per_s"]))
        self.assertEqual((s["queued"][-1], s["dead"][-1]), (2, 2))

    def test_browser(self):
        q = "web"
        for i in range(3):
            self.cli("enqueue", q, "resize", '{"image":%d}' % i)
        self.cli("enqueue", q, "render", XSS, "--task-id", "xss-queued")
        self.cli("enqueue", q, "later", "--delay-ms", "3600000", "--task-id", "later-1")
        # One task delivered to a consumer and not finished: pending.
        self.r.xgroup_create(q, "workers", id="0")
        self.r.xreadgroup("workers", "w1", {q: ">"}, count=1)
        self.add_dead(q, 24)
        self.add_dead(q, 1, task_type="render", payload=XSS)
        # Tenants' tasks wait in their backlogs, outside the numbers below.
        for tenant, n in (("acme", 2), ("<b>globex</b>", 1)):
            for i in range(n):
                self.cli("enqueue", q, "resize", '{"image":%d}' % i, "--tenant", tenant)
        before = self.stats(q)
        self.assertEqual((before["queue_length"], before["pending_total"], before["delayed"], before["dlq_length"]),
                         (4, 1, 1, 25))

        base = self.start_dashboard()
        profile = tempfile.TemporaryDirectory(prefix="streamq-chromium-")
        self.addCleanup(profile.cleanup)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--window-size=1400,1800", "--user-data-dir=" + profile.name):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.addCleanup(driver.quit)
        wait = WebDriverWait(driver, 20)

        def text(element_id):
            return driver.find_element(By.ID, element_id).text

        def section(state):
            return driver.find_element(By.CSS_SELECTOR, 'section.tasks[data-state="%s"]' % state)

        def rows(state):
            return section(state).find_elements(By.CSS_SELECTOR, "tbody tr[data-id]")

        def ids(state):
            # In one script: the page may redraw the table between two WebDriver calls.
            return driver.execute_script(
                "return [...document.querySelectorAll('section.tasks[data-state=\"' + arguments[0] + "
                "'\"] tbody tr[data-id]')].map((r) => r.dataset.id)", state)

        def payloads():
            return driver.execute_script(
                "return [...document.querySelectorAll('td.payload')].map((c) => c.textContent)")

        def click(state, selector, row=None):
            """Clicks in a table that the page redraws every few seconds: again when it was redrawn."""
            def attempt(_):
                try:
                    within = rows(state)[row] if row is not None else section(state)
                    within.find_element(By.CSS_SELECTOR, selector).click()
                    return True
                except StaleElementReferenceException:
                    return False
            wait.until(attempt)

        def accept_confirm():
            wait.until(lambda d: d.switch_to.alert)
            driver.switch_to.alert.accept()

        # The list of queues links to the queue's page.
        driver.get(base + "/")
        wait.until(lambda d: d.find_elements(By.LINK_TEXT, q))
        driver.find_element(By.LINK_TEXT, q).click()
        wait.until(lambda d: text("stat-dead") == "25")

        # The numbers are Stats' numbers.
        self.assertEqual(text("queue-name"), q)
        self.assertEqual(text("stat-queued"), str(before["queue_length"] - before["pending_total"]))
        self.assertEqual(text("stat-pending"), str(before["pending_total"]))
        self.assertEqual(text("stat-delayed"), str(before["delayed"]))
        self.assertEqual(text("stat-dead"), str(before["dlq_length"]))
        self.assertEqual(text("stat-consumers"), str(before["consumers_active"]))

        # The charts are drawn from the dashboard's samples.
        wait.until(lambda d: d.execute_script("return Chart.getChart('chart-backlog').data.labels.length") >= 3)
        backlog = driver.execute_script("return Chart.getChart('chart-backlog').data.datasets[0].data")
        self.assertEqual(backlog[-1], 3)

        # Tables: pending with its owner, delayed, and dead letters a page of 20 at a time.
        wait.until(lambda d: len(ids("pending")) == 1 and len(ids("dead")) == 20)
        pending_entry = self.r.xpending_range(q, "workers", "-", "+", 10)[0]
        self.assertEqual(ids("pending"), [pending_entry["message_id"].decode()])
        self.assertEqual(pending_entry["consumer"], b"w1")
        self.assertEqual(ids("delayed"), ["later-1"])
        click("dead", "button.next")
        wait.until(lambda d: len(ids("dead")) == 5)
        self.assertIn("page 2", section("dead").find_element(By.CSS_SELECTOR, ".page-info").text)
        dead_ids = set(ids("dead"))
        click("dead", "button.first")
        wait.until(lambda d: len(ids("dead")) == 20)
        dead_ids |= set(ids("dead"))
        self.assertEqual(dead_ids, {e[0].decode() for e in self.r.xrange(q + ":dlq")})

        # Payloads are text: the <script> and the onerror handler are shown, never run; in the
        # tables and in a task's detail view alike.
        self.assertTrue(any("<script>window.__xss = 1</script>" in c for c in payloads()), payloads())
        self.assertIsNone(driver.execute_script("return window.__xss"))
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "td.payload script, td.payload img"), [])
        xss_entry = next(i for i, f in self.r.xrange(q) if f[b"task_id"] == b"xss-queued").decode()
        click("queued", "button.link[data-entry='%s']" % xss_entry)
        wait.until(lambda d: d.find_element(By.ID, "detail-box").is_displayed())
        self.assertIn("window.__xss = 1", text("detail"))
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "#detail-box script, #detail-box img"), [])
        self.assertIsNone(driver.execute_script("return window.__xss"))

        # A flow's task: its parent and children, each a link to its record (records as
        # Producer::enqueue_flow and the scripts write them).
        # (kid3 is in another queue: FlowNode::queue, named in the parent's flow_queues.)
        gpu = q + "-gpu"
        self.r.hset(q + ":task:flow-root", mapping={"state": "waiting", "type": "album",
                                                   "flow_children": "7:kid<b>14:kid24:kid3",
                                                   "flow_queues": "4:kid3%d:%s" % (len(gpu), gpu)})
        self.r.hset(q + ":task:kid<b>1", mapping={"state": "done", "type": "resize", "flow_parent": "flow-root"})
        self.r.hset(q + ":task:kid2", mapping={"state": "running", "type": "resize", "flow_parent": "flow-root"})
        self.r.hset(gpu + ":task:kid3", mapping={"state": "queued", "type": "thumb", "flow_parent": "flow-root",
                                                 "flow_home": q})
        driver.find_element(By.ID, "lookup-id").send_keys("flow-root")
        driver.find_element(By.CSS_SELECTOR, "#lookup button[type=submit], #lookup input[type=submit]").click()
        wait.until(lambda d: text("detail-title") == "flow-root")
        children = driver.execute_script(
            "return [...document.querySelectorAll('#detail-flow tr[data-child]')]"
            ".map((r) => [...r.cells].map((c) => c.textContent))")
        self.assertEqual(children, [["kid<b>1", "resize", "done"], ["kid2", "resize", "running"],
                                    ["kid3 (queue %s)" % gpu, "thumb", "queued"]])
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "#detail-flow b"), [])
        driver.find_element(By.CSS_SELECTOR, "#detail-flow button[data-task='kid2']").click()
        wait.until(lambda d: text("detail-title") == "kid2")
        self.assertIn("Parent: flow-root album · waiting", text("detail-flow"))
        driver.find_element(By.CSS_SELECTOR, "#detail-flow button[data-task='flow-root']").click()
        wait.until(lambda d: text("detail-title") == "flow-root")
        # The child in the other queue is looked up there, and its parent back in this one.
        driver.find_element(By.CSS_SELECTOR, "#detail-flow button[data-task='kid3']").click()
        wait.until(lambda d: text("detail-title") == "kid3")
        self.assertIn("Parent: flow-root album · waiting", text("detail-flow"))
        driver.find_element(By.CSS_SELECTOR, "#detail-flow button[data-task='flow-root']").click()
        wait.until(lambda d: text("detail-title") == "flow-root")
        # A task outside a flow shows none of it.
        driver.find_element(By.ID, "lookup-id").clear()
        self.r.hset(q + ":task:alone", mapping={"state": "queued", "type": "resize"})
        driver.find_element(By.ID, "lookup-id").send_keys("alone")
        driver.find_element(By.CSS_SELECTOR, "#lookup button[type=submit], #lookup input[type=submit]").click()
        wait.until(lambda d: text("detail-title") == "alone")
        self.assertFalse(driver.find_element(By.ID, "detail-flow").is_displayed())

        screenshot = os.environ.get("STREAMQ_SCREENSHOT") or os.path.join(self.dir, "dashboard.png")
        driver.save_screenshot(screenshot)

        # Addresses that open a task, a flow or a batch, and the detail view shown in the address.
        page = base + "/queue?" + urllib.parse.urlencode({"name": q})
        self.r.hset(q + ":batches:nightly", mapping={"state": "closed", "total": "5", "done": "3", "failed": "1"})
        driver.get(page + "&batch=nightly")
        wait.until(lambda d: text("detail-title") == "batch nightly")
        self.assertEqual(text("detail-flow"), "closed · 5 members: 3 done, 1 failed, 1 pending")
        driver.get(page + "&flow=kid2")
        wait.until(lambda d: text("detail-title") == "kid2")
        self.assertIn("Parent: flow-root album · waiting", text("detail-flow"))
        driver.get(page + "&task=later-1")
        wait.until(lambda d: text("detail-title") == "later-1")
        self.assertEqual(json.loads(text("detail"))["state"], "delayed")
        wait.until(lambda d: len(ids("pending")) == 1)
        click("pending", "button.link")
        wait.until(lambda d: text("detail-title") == pending_entry["message_id"].decode())
        self.assertEqual(json.loads(text("detail"))["consumer"], "w1")
        self.assertIn("task=" + urllib.parse.quote(pending_entry["message_id"].decode()), driver.current_url)
        driver.find_element(By.ID, "batch-id").send_keys("nightly")
        driver.find_element(By.CSS_SELECTOR, "#batch-lookup button[type=submit]").click()
        wait.until(lambda d: text("detail-title") == "batch nightly")
        self.assertTrue(driver.current_url.endswith("&batch=nightly"), driver.current_url)
        driver.find_element(By.ID, "detail-close").click()
        self.assertEqual(driver.current_url, page)

        # Run a delayed task now.
        click("delayed", "td.row-actions button", row=0)
        wait.until(lambda d: text("stat-delayed") == "0" and text("stat-queued") == "4")
        self.assertEqual(self.r.zcard(q + ":delayed"), 0)

        # Pause and resume.
        driver.find_element(By.ID, "pause").click()
        wait.until(lambda d: d.find_element(By.ID, "paused-badge").is_displayed())
        self.assertEqual(self.r.exists(q + ":paused"), 1)
        driver.find_element(By.ID, "resume").click()
        wait.until(lambda d: not d.find_element(By.ID, "paused-badge").is_displayed())
        self.assertEqual(self.r.exists(q + ":paused"), 0)

        # The tenants, the largest backlog first; a tenant paused and resumed by its button.
        def tenant_rows():
            return driver.execute_script(
                "return [...document.querySelectorAll('#tenants tr[data-tenant]')]"
                ".map((r) => [...r.cells].map((c) => c.textContent))")

        def click_tenant(tenant, selector):
            def attempt(_):
                try:
                    for row in driver.find_elements(By.CSS_SELECTOR, "#tenants tr[data-tenant]"):
                        if row.get_attribute("data-tenant") == tenant:
                            row.find_element(By.CSS_SELECTOR, selector).click()
                            return True
                    return False
                except StaleElementReferenceException:
                    return False
            wait.until(attempt)

        wait.until(lambda d: d.find_element(By.ID, "tenants").is_displayed())
        self.assertEqual(tenant_rows(), [["acme", "2", "0", "", "–", "–", "–", "–", "Pause"],
                                         ["<b>globex</b>", "1", "0", "", "–", "–", "–", "–", "Pause"]])
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "#tenants b"), [])
        click_tenant("acme", "button.tenant-pause")
        wait.until(lambda d: tenant_rows()[0][3] == "paused" and tenant_rows()[0][8] == "Resume")
        self.assertEqual(self.r.hget(q + ":tenants:config:acme", "paused"), b"1")
        self.assertIn("tenant acme paused", text("notice"))
        click_tenant("acme", "button.tenant-resume")
        wait.until(lambda d: tenant_rows()[0][3] == "" and tenant_rows()[0][8] == "Pause")
        self.assertIsNone(self.r.hget(q + ":tenants:config:acme", "paused"))

        # The stored schedules; one paused with the note its prompt asks for, then resumed.
        name = "<b>report</b>"
        self.cli("schedules", "upsert", q, name, "--schedule", "0 9 * * mon-fri Europe/Berlin", "--type", "pdf")

        def schedule_rows():
            return driver.execute_script(
                "return [...document.querySelectorAll('#schedules tr[data-schedule]')]"
                ".map((r) => [...r.cells].map((c) => c.textContent))")

        def click_schedule(selector):
            def attempt(_):
                try:
                    driver.find_element(By.CSS_SELECTOR, "#schedules tr[data-schedule] " + selector).click()
                    return True
                except (StaleElementReferenceException, NoSuchElementException):
                    return False
            wait.until(attempt)

        wait.until(lambda d: d.find_element(By.ID, "schedules").is_displayed())
        [row] = schedule_rows()
        self.assertEqual(row[:5] + row[6:], [name, "0 9 * * mon-fri Europe/Berlin", "pdf", "running", "api",
                                             "–", "–", "–", "Pause"])
        self.assertRegex(row[5], r"^(\d{4}-\d\d-\d\dT0[78]:00:00Z, ){2}\d{4}-\d\d-\d\dT0[78]:00:00Z$")
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "#schedules b"), [])
        click_schedule("button.schedule-pause")
        wait.until(lambda d: d.switch_to.alert)
        driver.switch_to.alert.send_keys("holidays (ops)")
        driver.switch_to.alert.accept()
        wait.until(lambda d: schedule_rows()[0][3] == "paused: holidays (ops)" and schedule_rows()[0][9] == "Resume")
        self.assertEqual(self.r.hget(q + ":sched:" + name, "note"), b"holidays (ops)")
        self.assertIn("schedule %s paused" % name, text("notice"))
        click_schedule("button.schedule-resume")
        wait.until(lambda d: schedule_rows()[0][3] == "running" and schedule_rows()[0][9] == "Pause")
        self.assertIsNone(self.r.hget(q + ":sched:" + name, "paused"))

        # Delete one selected dead letter (after a confirmation).
        victim_id = ids("dead")[0]
        click("dead", "input[type=checkbox]", row=0)
        click("dead", "button.delete-selected")
        accept_confirm()
        wait.until(lambda d: text("stat-dead") == "24")
        self.assertEqual(self.r.xrange(q + ":dlq", victim_id, victim_id), [])

        # Replay every dead letter: they are back in the queue with a fresh attempt count.
        driver.find_element(By.ID, "replay-all").click()
        accept_confirm()
        wait.until(lambda d: text("stat-dead") == "0" and text("stat-queued") == "28")
        self.assertEqual(self.r.xlen(q + ":dlq"), 0)
        after = self.stats(q)
        self.assertEqual(after["queue_length"] - after["pending_total"], 28)
        replayed = [f for _, f in self.r.xrange(q) if b"replay_count" in f]
        self.assertEqual(len(replayed), 24)
        self.assertTrue(all(f[b"retry_count"] == b"0" and f[b"replay_count"] == b"1" for f in replayed))

        # A queue whose very name is markup: on the list of queues and as its page's title, text.
        hostile = '<img src=x onerror="window.__xss = 3">q'
        self.cli("enqueue", hostile, "ping")
        driver.get(base + "/")
        wait.until(lambda d: d.find_elements(By.LINK_TEXT, hostile))
        driver.find_element(By.LINK_TEXT, hostile).click()
        wait.until(lambda d: text("stat-queued") == "1")
        self.assertEqual(text("queue-name"), hostile)
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "header img"), [])
        self.assertIsNone(driver.execute_script("return window.__xss"))

        # No script error and no blocked resource on the way (CSP violations are logged as SEVERE).
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual(severe, [])
