"""Suite-wide hooks: the PostgreSQL run leaves out the tests the store choice cannot change.

The suite runs twice, on SQLite and with ``DEX_TEST_DATABASE=postgres``. A test marked
``store_independent`` needs no store or picks its own: an explicit PostgreSQL database, a
PostgreSQL cluster of its own, a store file it opens itself. So does every test of a module
in ``STORE_INDEPENDENT_MODULES`` and every test asking for the ``db_url`` fixture. Both runs
would run the very same test, so the PostgreSQL run deselects it. The SQLite run checks
each of them: one that asks ``dex_server.testing.selected_database()`` (as
``running_server`` does for a server without an explicit store) fails, since the PostgreSQL
run would have run it differently.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import dex_server.testing as server_testing
import pytest

MARK = "store_independent"

# Whole modules of such tests.
STORE_INDEPENDENT_MODULES = frozenset(
    {
        # an explicit PostgreSQL database or cluster for every test
        "test_faults_fencing",
        "test_faults_store",
        "test_multinode_pg",
        "test_postgres_server",
        "test_store_postgres",
        # no server, or dexcli on a store of the test's own
        "test_cli_example",
        "test_cli_serve",
        "test_dispatch_unit",
        "test_loops",
        "test_readonly_store",
        "test_store",
        "test_store_singletons",
        "test_store_step_reads",
        "test_unix_socket",
        "test_stream_hub",
        "test_web_unit",
    }
)

_asked: list[bool] = [False]
_selected_database = server_testing.selected_database


def _recording_selected_database() -> str:
    _asked[0] = True
    return _selected_database()


# Module-global lookups (RunningServer.start, fresh_database) go through this wrapper.
server_testing.selected_database = _recording_selected_database


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}: the store choice (DEX_TEST_DATABASE) cannot change this test, so the "
        "PostgreSQL run leaves it out",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        explicit_database = "db_url" in getattr(item, "fixturenames", ())
        if item.path.stem in STORE_INDEPENDENT_MODULES or explicit_database:
            item.add_marker(MARK)
    # Test modules that imported the function itself get the recording one too.
    for name, module in list(sys.modules.items()):
        imported = vars(module).get("selected_database")
        if name.startswith("tests.") and imported is _selected_database:
            module.selected_database = _recording_selected_database  # type: ignore[attr-defined]
    if _selected_database() != "postgres":
        return
    kept = [item for item in items if item.get_closest_marker(MARK) is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture of this test (module-scoped ones included) is set up.
    _asked[0] = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "teardown" and _asked[0] and item.get_closest_marker(MARK) is not None:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is marked {MARK} but asked selected_database(): "
            "DEX_TEST_DATABASE changes it, so the PostgreSQL run must keep it (drop the mark)"
        )
    return report


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh folder under ``/tmp``, removed after the test, for Unix sockets.

    A Unix socket's path is limited to 107 bytes; pytest's own folders can be longer.
    """
    path = Path(tempfile.mkdtemp(prefix="dexu-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
