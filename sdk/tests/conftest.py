"""Suite-wide hooks: the PostgreSQL run leaves out the tests the store choice cannot change.

The suite runs twice, on SQLite and with ``DEX_TEST_DATABASE=postgres``. A test marked
``store_independent`` (or in a module of ``STORE_INDEPENDENT_MODULES``) starts no server:
both runs would run the very same test, so the PostgreSQL run deselects it. The SQLite run
checks each mark: a marked test that asks ``dex_server.testing.selected_database()`` (as
``running_server`` does) fails, since the PostgreSQL run would have run it differently.
"""

from __future__ import annotations

from collections.abc import Generator

import dex_server.testing as server_testing
import pytest

MARK = "store_independent"

# Whole modules of such tests: none starts a server.
STORE_INDEPENDENT_MODULES = frozenset(
    {
        "test_api_signatures",
        "test_exported_members",
        "test_runtime_blob_cache",
        "test_runtime_client_errors",
        "test_runtime_worker_options",
        "test_unit_client_surface",
        "test_unit_codec",
        "test_unit_credentials",
        "test_unit_definitions",
        "test_unit_errors",
        "test_unit_flow_model",
        "test_unit_invoke",
        "test_unit_state",
        "test_unit_state_compat",
        "test_unit_value_codecs",
        "test_unit_waits",
        "test_unit_worker_signatures",
        "test_url_segments",
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
        if item.path.stem in STORE_INDEPENDENT_MODULES:
            item.add_marker(MARK)
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
