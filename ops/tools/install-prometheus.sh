#!/bin/sh
# Installs Prometheus (prometheus, promtool) and Alertmanager (prometheus-alertmanager, amtool)
# from the distribution's packages when they are missing, for the ops tests
# (tests/ops: promtool test rules, amtool check-config, the end-to-end alerting test).
#
# Idempotent and quiet: prints nothing and changes nothing when all four are on PATH. Installs
# only as root, with apt-get; otherwise it says what to install and exits 0 (the tests that need
# the binaries are skipped, with the reason).
set -eu

missing=""
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing="prometheus"
if ! command -v amtool >/dev/null 2>&1 ||
   ! { command -v prometheus-alertmanager || command -v alertmanager; } >/dev/null 2>&1; then
    missing="${missing:+$missing }prometheus-alertmanager"
fi
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-prometheus.sh: not installing ($missing): needs root and apt-get." >&2
    echo "  Install them with: sudo apt-get install -y $missing   (ops tests are skipped meanwhile)" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086  # $missing is a list of package names
if ! apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
echo "install-prometheus.sh: installed $missing" >&2
