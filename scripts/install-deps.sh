#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what streamq needs to build, test and run its demo on Debian bookworm (as root).
# Idempotent: installs only the missing packages, and touches apt only when one is missing.
# Installing redis-server may start Debian's system redis service; streamq's scripts never
# use it (they run private servers), and this script does not start, stop or configure it.
set -euo pipefail

# Usage: install-deps.sh [--test]   (--test adds what only the test command needs)
packages=(cmake g++ make pkg-config libhiredis-dev nlohmann-json3-dev libgtest-dev
          redis-server redis-tools python3 python3-redis
          libhowardhinnant-date-dev tzdata                 # named time zones (Schedule::cron)
          libasio-dev                                      # the asio component (streamq::asio)
          libcli11-dev libcpp-httplib-dev libjs-chart.js)  # the streamq command (tools/)
if [[ ${1:-} == --test ]]; then
  packages+=(ccache)                    # scripts/test.sh: compilations cached between runs
  packages+=(clang-format)              # scripts/format.sh --check
  packages+=(clang-tidy)                # the tidy stage (run-clang-tidy)
  packages+=(clang libclang-rt-14-dev)  # tests/fuzz: libFuzzer and clang's sanitizers (the fuzz stage)
  packages+=(libssl-dev openssl)       # the hiredis 1.4 stage: hiredis_ssl, and the TLS tests' certificates
  packages+=(faketime)                  # Reliability.ClientClocksAnHourOffChangeNoTiming: libfaketime
  packages+=(dpkg-dev file)             # the packages stage: cpack -G DEB's dpkg-shlibdeps (which needs file)
  packages+=(python3-prometheus-client python3-yaml)  # tests/cli: Prometheus' text parser, ops/*.yml
  packages+=(chromium chromium-driver python3-selenium)  # tests/cli/dashboard_test.py: a headless browser
  packages+=(python3-pytest python3-mypy python3-pip python3-venv)  # tests/python: the Python client, pip install ./python in a venv
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed$'; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all dependencies present"
  exit 0
fi

if ((EUID != 0)); then
  echo "install-deps: missing packages: ${missing[*]}; run as root (sudo bash $0)" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
