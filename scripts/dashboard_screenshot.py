#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Makes docs/dashboard.png, the picture of `streamq dashboard` in docs/cli-and-dashboard.md: a private
redis-server, the example worker, a minute of tasks (some failing into the dead letters, some
delayed), and headless Chromium photographing the queue's page. Every process it starts it stops.

  STREAMQ_CLI=build/tools/streamq STREAMQ_WORKER=build/examples/streamq-worker \\
    /usr/bin/python3 scripts/dashboard_screenshot.py [docs/dashboard.png] [seconds]"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cli"))
from harness import CLI, RedisTestCase, free_port  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.png"
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 90


class Screenshot(RedisTestCase):
    def test_screenshot(self):
        q = "emails"
        env = dict(os.environ, STREAMQ_URL=self.url)
        procs = []

        def start(args):
            p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            return p
        self.addCleanup(lambda: [(p.terminate(), p.wait(10)) for p in procs])
        port = free_port()
        start([CLI, "dashboard", "--listen", "127.0.0.1:%d" % port, "--no-auth", "--sample-interval", "1"])
        start([os.environ["STREAMQ_WORKER"], "--url", self.url, "--stream", q, "--concurrency", "2",
               "--retry-base-ms", "300"])
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < SECONDS:
            phase = (time.monotonic() - started) / SECONDS
            lines = []
            for _ in range(int(40 + 160 * phase * (1.2 - phase)) + random.randint(0, 20)):
                n += 1
                kind = random.random()
                if kind < 0.02:
                    lines.append({"type": "send_email", "payload": {"to": "?"}})
                elif kind < 0.04:
                    lines.append({"type": "always_fail", "payload": {"n": n}})
                elif kind < 0.06:
                    lines.append({"type": "remind", "payload": {"what": "invoice %d" % n}, "delay_ms": 600000})
                else:
                    lines.append({"type": "send_email", "payload": {"to": "user%d@example.com" % n}})
            self.cli("enqueue", q, "--stdin", stdin="".join(json.dumps(x) + "\n" for x in lines))
            time.sleep(1)

        profile = tempfile.TemporaryDirectory(prefix="streamq-chromium-")
        self.addCleanup(profile.cleanup)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--window-size=1400,1250", "--hide-scrollbars", "--user-data-dir=" + profile.name):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        self.addCleanup(driver.quit)
        driver.get("http://127.0.0.1:%d/queue?name=%s" % (port, q))
        WebDriverWait(driver, 20).until(
            lambda d: d.execute_script("return window.Chart && Chart.getChart('chart-backlog') && "
                                       "document.querySelectorAll('section.tasks tbody tr[data-id]').length > 0"))
        time.sleep(1)
        driver.save_screenshot(OUT)
        print("wrote", OUT, "after", n, "tasks")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
