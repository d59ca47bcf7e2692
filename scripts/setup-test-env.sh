#!/usr/bin/env bash
# What the test suite needs beyond pip: headless Chromium, which the HTML report test loads
# the page in (tests/simulator/test_plan_report.py). Run by the README's test command, so CI
# installs it on a fresh machine. Installs Debian's chromium with apt-get when it is missing
# and this runs as root; otherwise says what to do (the test then skips, or fails where
# INFERCAST_REQUIRE_BROWSER=1 asks for the browser).
set -euo pipefail

for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then
    echo "setup-test-env: $("$name" --version 2>/dev/null || echo "$name") at $(command -v "$name")"
    exit 0
  fi
done

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup-test-env: installing Debian's chromium (headless browser for the HTML report test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q chromium >/dev/null
  echo "setup-test-env: $(chromium --version)"
else
  echo "setup-test-env: Chromium is missing and cannot be installed here (needs root and apt-get):" \
       "install it (Debian/Ubuntu: apt-get install chromium) or set INFERCAST_CHROMIUM to a Chromium binary;" \
       "without it the HTML report test skips, or fails when INFERCAST_REQUIRE_BROWSER=1" >&2
fi
