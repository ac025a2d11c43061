"""Pins the public signatures of Workers, Worker options, pull registration, the blob
cache, credentials and codecs: module, names, parameter names, kinds and defaults.

The shapes are those of the Dex model's Python API (code written for it calls them
positionally, by keyword, or implements them); our additions come after them, keyword-only
or with defaults. A change here breaks such code: change the data only on purpose.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

# "module.Name.method": (KIND:name[=default], ...); "<fn>" stands for a function default.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "dex.worker.Worker.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:registry",
        "POSITIONAL_OR_KEYWORD:blob_cache=None",
        "POSITIONAL_OR_KEYWORD:options=None",
    ),
    "dex.worker.Worker.start": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.worker.Worker.stop": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:drain_timeout=None",
        "KEYWORD_ONLY:wait=True",
    ),
    "dex.worker.Worker.close": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.worker.Worker.wait_pull_registered": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:timeout=None",
    ),
    "dex.worker.Worker.pull_registration_state": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.worker.Worker.__enter__": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.worker.Worker.__exit__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:exception_type",
        "POSITIONAL_OR_KEYWORD:exception",
        "POSITIONAL_OR_KEYWORD:traceback",
    ),
    "dex.async_worker.AsyncWorker.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:registry",
        "POSITIONAL_OR_KEYWORD:blob_cache=None",
        "POSITIONAL_OR_KEYWORD:options=None",
    ),
    "dex.async_worker.AsyncWorker.start": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.async_worker.AsyncWorker.stop": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:drain_timeout=None",
    ),
    "dex.async_worker.AsyncWorker.close": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.async_worker.AsyncWorker.wait_pull_registered": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:timeout=None",
    ),
    "dex.async_worker.AsyncWorker.pull_registration_state": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.async_worker.AsyncWorker.__aenter__": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.async_worker.AsyncWorker.__aexit__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:exception_type",
        "POSITIONAL_OR_KEYWORD:exception",
        "POSITIONAL_OR_KEYWORD:traceback",
    ),
    "dex.worker_options.WorkerOptions.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:bind_address=':8803'",
        "POSITIONAL_OR_KEYWORD:worker_target=None",
        "POSITIONAL_OR_KEYWORD:server_address='localhost:8801'",
        "POSITIONAL_OR_KEYWORD:attribute_index_sync_timeout=datetime.timedelta(seconds=120)",
        "POSITIONAL_OR_KEYWORD:pull=None",
        "POSITIONAL_OR_KEYWORD:credential=None",
    ),
    "dex.worker_options.PullWorkerOptions.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:max_concurrent_tasks=0",
        "POSITIONAL_OR_KEYWORD:idle_streams_per_queue=0",
        "POSITIONAL_OR_KEYWORD:app_worker_id=''",
        "POSITIONAL_OR_KEYWORD:stop_drain_timeout=datetime.timedelta(0)",
        "POSITIONAL_OR_KEYWORD:stop_on_permanent_stream_rejection=False",
        "POSITIONAL_OR_KEYWORD:reserved_rpc_tasks=None",
    ),
    "dex.worker_options.WorkerTarget.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:address=''",
        "POSITIONAL_OR_KEYWORD:headless=False",
        "POSITIONAL_OR_KEYWORD:pull=False",
    ),
    "dex.pull_registration.PullRegistrationState.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:is_ready=False",
        "POSITIONAL_OR_KEYWORD:queues=()",
    ),
    "dex.pull_registration.PullQueueRegistrationState.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:queue",
        "POSITIONAL_OR_KEYWORD:has_registered_stream",
        "POSITIONAL_OR_KEYWORD:last_permanent_error",
    ),
    "dex.pull_registration.PullRegistrationError.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:queue",
        "POSITIONAL_OR_KEYWORD:error",
    ),
    "dex.blob_cache.BlobCache.get": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:blob_id",
    ),
    "dex.blob_cache.BlobCache.put": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:blob_id",
        "POSITIONAL_OR_KEYWORD:payload",
    ),
    "dex.blob_cache.BlobCache.delete": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:blob_id",
    ),
    "dex.blob_cache.BlobCache.delete_all": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.blob_cache.BlobCache.close": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.blob_cache.BlobCacheConfig.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:directory",
        "POSITIONAL_OR_KEYWORD:max_bytes",
        "POSITIONAL_OR_KEYWORD:frequency_counters=10000",
    ),
    "dex.blob_cache.open_blob_cache": ("POSITIONAL_OR_KEYWORD:config",),
    "dex.credential.FileCredential.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:path",
    ),
    "dex.credential.FileCredential.token": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.credential.ApiKeyCredential.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:token_url",
        "POSITIONAL_OR_KEYWORD:server_id",
        "POSITIONAL_OR_KEYWORD:api_key",
        "KEYWORD_ONLY:exchange_timeout=10.0",
    ),
    "dex.credential.ApiKeyCredential.token": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.credential.ApiKeyCredential.close": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.credential.Credential.token": ("POSITIONAL_OR_KEYWORD:self",),
    "dex.codec.CodecRegistry.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:codecs=None",
    ),
    "dex.codec.CodecRegistry.resolve": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:type_hint",
    ),
    "dex.codec.JsonCodec.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:type_name",
        "POSITIONAL_OR_KEYWORD:decoder",
        "POSITIONAL_OR_KEYWORD:encoder=<fn>",
        "POSITIONAL_OR_KEYWORD:expected_type=None",
    ),
    "dex.codec.JsonCodec.encode": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:value",
    ),
    "dex.codec.JsonCodec.decode": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:value",
    ),
    "dex.codec.Value.__init__": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:kind",
        "POSITIONAL_OR_KEYWORD:data",
    ),
    "dex.codec.Codec.encode": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:value",
    ),
    "dex.codec.Codec.decode": (
        "POSITIONAL_OR_KEYWORD:self",
        "POSITIONAL_OR_KEYWORD:value",
    ),
}


def _render(fn: Any) -> tuple[str, ...]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        default = ""
        if p.default is not inspect.Parameter.empty:
            default = "=" + ("<fn>" if callable(p.default) else repr(p.default))
        out.append(f"{p.kind.name}:{p.name}{default}")
    return tuple(out)


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name)
        return obj
    raise LookupError(path)


@pytest.mark.parametrize("path", sorted(SIGNATURES))
def test_signature_is_pinned(path: str) -> None:
    assert _render(_resolve(path)) == SIGNATURES[path]


def test_public_modules_export_the_names() -> None:
    modules = {
        "dex.async_worker": {"AsyncWorker"},
        "dex.worker": {"Worker"},
        "dex.worker_options": {"PullWorkerOptions", "WorkerOptions", "WorkerTarget"},
        "dex.pull_registration": {
            "PullQueueRegistrationState",
            "PullRegistrationError",
            "PullRegistrationState",
        },
        "dex.blob_cache": {"BlobCache", "BlobCacheConfig", "open_blob_cache"},
        "dex.credential": {
            "ApiKeyCredential",
            "ApiKeyExchangeError",
            "Credential",
            "FileCredential",
        },
        "dex.codec": {
            "BOOL",
            "BYTES",
            "DOUBLE",
            "INT64",
            "STRING",
            "Codec",
            "CodecRegistry",
            "JsonCodec",
            "Value",
            "WireKind",
        },
    }
    import dex

    for name, names in modules.items():
        module = importlib.import_module(name)
        assert set(module.__all__) == names, name
        for member in names:
            assert getattr(module, member) is getattr(dex, member), (name, member)
