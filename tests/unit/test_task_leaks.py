"""The root conftest's ``no_leaked_tasks`` check, run on a throw-away test module in a child pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MODULE = """
import asyncio

import pytest

holder = []


async def test_leaks_on_the_session_loop():
    holder.append(asyncio.create_task(asyncio.sleep(3600), name="forgotten"))


@pytest.mark.asyncio(loop_scope="function")
async def test_leaks_on_a_function_loop():
    holder.append(asyncio.create_task(asyncio.sleep(3600), name="forgotten-too"))


async def test_cleans_up():
    task = asyncio.create_task(asyncio.sleep(3600))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_finished_tasks_are_fine():
    await asyncio.create_task(asyncio.sleep(0))


def test_sync_tests_are_not_checked():
    pass


@pytest.mark.integration
async def test_cluster_tests_are_not_checked():
    holder.append(asyncio.create_task(asyncio.sleep(3600), name="shared-by-the-module"))


async def test_the_next_test_does_not_see_the_leaks():
    assert all(t.cancelled() for t in holder[:1]), "cancelled when reported"
"""


def test_a_test_that_leaves_a_task_pending_fails_and_the_task_is_cancelled(tmp_path: Path) -> None:
    (tmp_path / "test_module.py").write_text(MODULE)
    options = [
        "asyncio_mode=auto",
        "asyncio_default_fixture_loop_scope=session",
        "asyncio_default_test_loop_scope=session",
        "markers=integration",
    ]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-q", "-rE"]
    command += [arg for option in options for arg in ("-o", option)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*command, "test_module.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    out = done.stdout
    assert done.returncode == 1, out
    assert "7 passed, 2 errors" in out, out  # the two leaking tests pass, then fail at teardown
    errors = [line.split(" - ")[0] for line in out.splitlines() if line.startswith("ERROR ")]
    assert errors == [
        "ERROR test_module.py::test_leaks_on_the_session_loop",
        "ERROR test_module.py::test_leaks_on_a_function_loop",
    ]
    pending = "Failed: 1 asyncio task(s) still pending when the test ended: "
    assert f"{pending}forgotten (" in out and f"{pending}forgotten-too (" in out
    assert "shared-by-the-module" not in out
