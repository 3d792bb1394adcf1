"""Debian binaries the tests drive (prometheus, promtool, prometheus-alertmanager, amtool, redis-server,
chromium and chromedriver).

A test that needs one calls ``require(binary, package)``: it returns the binary's path, or skips the
test with the Debian package to install, so a machine without them skips those tests and never fails
them. ``needs(binary, package)`` is the same check as a ``skipif`` marker, for decorating a test.

``make test`` installs the packages when it can (root with apt-get: ``scripts/install_test_deps.sh``);
``make test-deps`` does only that.

``RAGTRACE_TEST_HIDE_BINARIES=redis-server,promtool`` makes those binaries count as missing, to check
that the tests needing them skip cleanly on a machine without them.

Under CI (``CI`` set, as ``.ci/run`` runs) ``require_in_ci`` fails instead of skipping: there the binary
must be present (``install_test_deps.sh --require`` installed it), so a skip would hide a broken setup.
"""

from __future__ import annotations

import os
import shutil

import pytest

# Debian installs these under /usr/bin or /usr/sbin; a non-root PATH may lack /usr/sbin.
_FALLBACK_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin")


def _hidden() -> set[str]:
    return {name.strip() for name in os.environ.get("RAGTRACE_TEST_HIDE_BINARIES", "").split(",") if name.strip()}


def find(binary: str, *alternatives: str) -> str | None:
    """Path of ``binary`` (or the first of ``alternatives`` found), else None."""
    hidden = _hidden()
    for name in (binary, *alternatives):
        if name in hidden:
            continue
        path = shutil.which(name)
        if path:
            return path
        for directory in _FALLBACK_DIRS:
            candidate = os.path.join(directory, name)
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def reason(binary: str, package: str) -> str:
    """The skip reason for a missing binary, naming the Debian package that provides it."""
    return f"{binary} not installed (Debian package {package}; `make test-deps` installs it)"


def require(binary: str, package: str, *alternatives: str) -> str:
    """Path of ``binary``; skips the calling test (or fixture) when it is not installed."""
    path = find(binary, *alternatives)
    if path is None:
        pytest.skip(reason(binary, package))
    return path


def require_in_ci(binary: str, package: str, *alternatives: str) -> str:
    """``require``, except that under CI (``$CI`` set) a missing binary fails the test instead of skipping it."""
    path = find(binary, *alternatives)
    if path is None and os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"{reason(binary, package)}; CI must have it (scripts/install_test_deps.sh --require)")
    return require(binary, package, *alternatives)


def needs(binary: str, package: str, *alternatives: str) -> pytest.MarkDecorator:
    """``require`` as a marker: ``@needs("promtool", "prometheus")``."""
    return pytest.mark.skipif(find(binary, *alternatives) is None, reason=reason(binary, package))
