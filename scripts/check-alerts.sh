#!/usr/bin/env bash
# Check the Prometheus alert rules and run their unit tests with promtool.
#
# promtool is taken from PATH, else from .venv/promtool. When it is in neither, the Debian package
# `prometheus` is fetched with apt-get (non-interactive, quiet) and only its promtool is unpacked
# into .venv/promtool: installing the package would also enable and start a Prometheus server.
set -euo pipefail

cd "$(dirname "$0")/.."
RULES=deploy/prometheus/alerts.yml
TESTS=deploy/prometheus/alerts_test.yml
LOCAL=.venv/promtool

fetch_promtool() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; fi
  echo "check-alerts: fetching promtool (apt package prometheus) into $LOCAL" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null || echo "check-alerts: apt-get update failed; trying the lists there are" >&2
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  (cd "$TMP" && apt-get download -qq -o APT::Sandbox::User=root prometheus >/dev/null)
  dpkg-deb -x "$TMP"/prometheus_*.deb "$TMP/root"
  mkdir -p "$LOCAL"
  install -m 0755 "$TMP/root/usr/bin/promtool" "$LOCAL/promtool"
}

PROMTOOL=${PROMTOOL:-$(command -v promtool || true)}
if [ -z "$PROMTOOL" ]; then
  [ -x "$LOCAL/promtool" ] || fetch_promtool
  PROMTOOL=$LOCAL/promtool
fi

"$PROMTOOL" check rules "$RULES"
"$PROMTOOL" test rules "$TESTS"
