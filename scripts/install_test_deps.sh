#!/usr/bin/env bash
# Debian packages the tests drive, installed when missing and we can (root with apt-get):
#   prometheus              prometheus, promtool
#   prometheus-alertmanager prometheus-alertmanager, amtool
#   redis-server            redis-server
#   chromium chromium-driver chromium, chromedriver (the records explorer's browser tests, through Selenium)
# Used by `make test` (lenient: when it cannot install, it says which tests will skip and goes on),
# by `make test-deps` and by .ci/run (--require: failing to install is an error).
#
#   scripts/install_test_deps.sh [--require]
set -euo pipefail

REQUIRE=0
[ "${1:-}" = "--require" ] && REQUIRE=1

say() { printf '==> %s\n' "$*"; }

have() {  # Debian puts them in /usr/bin; a non-root PATH may lack /usr/sbin
  command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ] || [ -x "/usr/sbin/$1" ]
}

missing_packages() {
  local need=()
  { have prometheus && have promtool; } || need+=(prometheus)
  { have prometheus-alertmanager && have amtool; } || need+=(prometheus-alertmanager)
  have redis-server || need+=(redis-server)
  have chromium || need+=(chromium)
  have chromedriver || need+=(chromium-driver)
  echo "${need[@]:-}"
}

skips() {  # what skips without each package
  for pkg in "$@"; do
    case "$pkg" in
      prometheus) echo "  - prometheus: tests/integration/test_prometheus_dashboards.py and every promtool check" \
                       "(tests/grafana/test_rules.py, test_dashboards.py, test_deploy_compose.py," \
                       "tests/integration/test_redis_compose_config.py); test_prometheus_demo.py runs without Prometheus" ;;
      prometheus-alertmanager) echo "  - prometheus-alertmanager: the Alertmanager test in test_prometheus_dashboards.py" \
                                    "and the amtool check in tests/grafana/test_deploy_compose.py" ;;
      redis-server) echo "  - redis-server: tests/integration/test_redis_*.py (scale-out, queue, budget, shared state, workers)" ;;
      chromium|chromium-driver) echo "  - $pkg: tests/ragtrace_collector/explorer/test_browser.py (the records explorer in a browser)" ;;
    esac
  done
}

read -r -a need <<<"$(missing_packages)"
if [ ${#need[@]} -eq 0 ]; then
  say "test binaries present (prometheus, promtool, prometheus-alertmanager, amtool, redis-server, chromium, chromedriver)"
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "installing Debian packages for the tests: ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update && apt-get install -y --no-install-recommends "${need[@]}"; then
    say "installed ${need[*]} (Debian may have started them as services; the tests use their own ports)"
    read -r -a need <<<"$(missing_packages)"
    [ ${#need[@]} -eq 0 ] && exit 0
    say "still missing after apt-get: ${need[*]}"
  else
    say "apt-get could not install ${need[*]}"
  fi
else
  why="not root"
  command -v apt-get >/dev/null 2>&1 || why="no apt-get"
  say "missing Debian packages for the tests: ${need[*]} ($why, so not installing them)"
  echo "    install them with:  sudo apt-get install ${need[*]}    (or: sudo make test-deps)"
fi

echo "    these tests will SKIP:"
skips "${need[@]}"
[ "$REQUIRE" = 1 ] && exit 1
exit 0
