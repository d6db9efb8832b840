"""Fixtures for tests that compare karpy with the reference built from Karpenter's Go modules (e2e/karpenter_ref).

The reference is built (``e2e/karpenter_ref/build.sh``, idempotent, cached in ~/.cache/karpy-karpenter-ref)
during collection when a selected test needs it, so a first-time build (a few minutes) does not count against
any test's timeout. Tests skip only when no Go toolchain is installed; a failed build fails them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from e2e.karpenter_ref import KarpenterRef, ReferenceError, ensure_binary, go_available

NO_GO = "no Go toolchain on PATH: the Karpenter v1.15 reference (e2e/karpenter_ref) is built from Go modules"


def _build_log(config: pytest.Config) -> Path:
    root = Path(str(config.rootpath)) / ".e2e-run"
    root.mkdir(exist_ok=True)
    return root / "karpenter-ref-build.log"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the reference now if any selected test uses it."""
    if config.option.collectonly or not go_available():
        return
    if not any("karpenter_ref" in getattr(item, "fixturenames", ()) for item in items):
        return
    # On failure the fixture runs the build again and reports the error on the tests that need it.
    with contextlib.suppress(ReferenceError):
        ensure_binary(_build_log(config))


@pytest.fixture(scope="session")
def karpenter_ref(pytestconfig: pytest.Config) -> KarpenterRef:
    """The built reference (sigs.k8s.io/karpenter + github.com/aws/karpenter-provider-aws v1.15)."""
    if not go_available():
        pytest.skip(NO_GO)
    return KarpenterRef(ensure_binary(_build_log(pytestconfig)))
