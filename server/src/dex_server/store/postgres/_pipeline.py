"""The writer's transactions on libpq's own pipeline, below psycopg's cursors.

psycopg adapts, sends and polls for every statement on its own, which costs a Step result
several times what the statements cost PostgreSQL (``bench/pg_statements.py``: about 68
against 22 us of client CPU per statement). :class:`Pipeline` sends a transaction's
statements through ``psycopg.pq`` (the libpq wrapper psycopg is built on): each distinct
statement prepared once per connection, parameters in text (``bytea`` in binary), results
in binary, writes queued until a read needs its rows, and one sync for the ``COMMIT``.

It covers the values the repositories use (``None``, ``bool``, ``int``, ``float``,
``str``, ``bytes``, lists of ``str`` or ``int``) and the column types they read. Anything
else raises :class:`Unsupported` and the store runs the group again through psycopg, which
covers everything; a statement PostgreSQL refuses raises its psycopg error, as psycopg's
pipeline would. A failed connection raises ``psycopg.OperationalError`` as psycopg would.
"""

from __future__ import annotations

import itertools
import select
import struct
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.pq.abc import PGresult

_Row = tuple[Any, ...]

# named statements kept per connection; statements past them are prepared unnamed each time
_PREPARED_MAX = 256
_BYTEA_OID = 17
_TEXT_ARRAY_OID = 1009
_INT8_ARRAY_OID = 1016
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_INT8 = struct.Struct(">q")
_INT4 = struct.Struct(">i")
_INT2 = struct.Struct(">h")
_FLOAT8 = struct.Struct(">d")
_FLOAT4 = struct.Struct(">f")
_OID = struct.Struct(">I")


def _text(b: bytes) -> str:
    return b.decode()


# binary result decoders by column type OID
_DECODERS: dict[int, Callable[[bytes], Any]] = {
    16: lambda b: b == b"\x01",  # bool
    17: bytes,  # bytea
    18: _text,  # "char"
    19: _text,  # name
    20: lambda b: _INT8.unpack(b)[0],
    21: lambda b: _INT2.unpack(b)[0],
    23: lambda b: _INT4.unpack(b)[0],
    25: _text,
    26: lambda b: _OID.unpack(b)[0],
    700: lambda b: _FLOAT4.unpack(b)[0],
    701: lambda b: _FLOAT8.unpack(b)[0],
    1042: _text,  # bpchar
    1043: _text,  # varchar
}


class Unsupported(Exception):
    """A value or a column type the bare pipeline does not handle (psycopg will)."""


class _LostPlace(psycopg.OperationalError):
    """The results did not match what was sent: the connection cannot be trusted."""


def dollars(sql: str) -> str:
    """``sql`` with psycopg's ``%s`` placeholders as ``$1``, ``$2``, ... (``%%`` is ``%``)."""
    out: list[str] = []
    n = 0
    i = 0
    while True:
        j = sql.find("%", i)
        if j < 0:
            out.append(sql[i:])
            return "".join(out)
        out.append(sql[i:j])
        nxt = sql[j + 1 : j + 2]
        if nxt == "s":
            n += 1
            out.append(f"${n}")
        elif nxt == "%":
            out.append("%")
        else:
            raise Unsupported(f"placeholder %{nxt} in {sql!r}")
        i = j + 2


def _array_item(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def encode(args: Sequence[object]) -> tuple[list[bytes | None], list[int], tuple[int, ...]]:
    """Parameter values, their formats (1 for binary) and their type OIDs (0: inferred)."""
    values: list[bytes | None] = []
    formats: list[int] = []
    oids: list[int] = []
    for v in args:
        oid = 0
        fmt = 0
        if v is None:
            b = None
        elif isinstance(v, str):
            b = v.encode()
        elif isinstance(v, bool):
            b = b"t" if v else b"f"
        elif isinstance(v, int):
            b = str(v).encode()
        elif isinstance(v, float):
            b = repr(v).encode()
        elif isinstance(v, bytes | bytearray | memoryview):
            b, fmt, oid = bytes(v), 1, _BYTEA_OID
        elif isinstance(v, list | tuple) and all(isinstance(x, str) for x in v):
            b = ("{" + ",".join(_array_item(x) for x in v) + "}").encode()
            oid = _TEXT_ARRAY_OID
        elif isinstance(v, list | tuple) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in v
        ):
            b = ("{" + ",".join(str(x) for x in v) + "}").encode()
            oid = _INT8_ARRAY_OID
        else:
            raise Unsupported(f"a parameter of type {type(v).__name__}")
        values.append(b)
        formats.append(fmt)
        oids.append(oid)
    return values, formats, tuple(oids)


def decode(res: PGresult) -> list[_Row]:
    """The rows of a binary ``TUPLES_OK`` result as psycopg would give them."""
    decoders = []
    for col in range(res.nfields):
        d = _DECODERS.get(res.ftype(col))
        if d is None:
            raise Unsupported(f"a column of type OID {res.ftype(col)}")
        decoders.append(d)
    rows: list[_Row] = []
    for r in range(res.ntuples):
        row = []
        for col, d in enumerate(decoders):
            v = res.get_value(r, col)
            row.append(None if v is None else d(v))
        rows.append(tuple(row))
    return rows


class Handle:
    """The rows of one statement sent in the pipeline, once they arrived."""

    __slots__ = ("rows", "done")

    def __init__(self) -> None:
        self.rows: list[_Row] = []
        self.done = False


class _Prepare:
    __slots__ = ("key",)

    def __init__(self, key: tuple[str, tuple[int, ...]]) -> None:
        self.key = key


# what each result in flight answers: a statement whose rows are wanted (Handle), one
# whose rows are not (None), a statement being prepared, or the sync
_Pending = Handle | _Prepare | None | str


class Pipeline:
    """One connection's transaction in libpq's pipeline mode (used by one thread).

    ``begin`` enters pipeline mode and queues ``BEGIN``; ``run`` queues a statement;
    ``rows`` queues one and waits for its rows; ``send`` queues one whose rows are read
    with :meth:`fetch` or after ``commit``. ``commit`` queues ``COMMIT`` and a sync and
    waits for everything; ``abort`` drains what is in flight, leaves pipeline mode and
    leaves the transaction to the caller's ``ROLLBACK``. Outside ``begin``/``commit``
    :attr:`active` is false and the repositories use psycopg.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.pg = conn.pgconn
        self.active = False
        self._prepared: dict[tuple[str, tuple[int, ...]], bytes] = {}
        self._names = itertools.count()  # never reused: a forgotten name may still exist
        self._pending: deque[_Pending] = deque()
        self._error: PGresult | None = None
        self._head_seen = False  # the oldest statement in flight has its result

    # ------------------------------------------------------------------ transaction

    def begin(self) -> None:
        self.pg.enter_pipeline_mode()
        self.active = True
        self._error = None
        self._head_seen = False
        self.pg.send_query_params(b"BEGIN", None)
        self._pending.append(None)

    def commit(self) -> None:
        self.pg.send_query_params(b"COMMIT", None)
        self._pending.append(None)
        self._sync()
        self._leave()

    def abort(self) -> None:
        """Drain what is in flight and leave pipeline mode (the caller rolls back).

        Raises ``psycopg.OperationalError`` (and closes the connection) if it cannot.
        """
        try:
            if self.pg.pipeline_status != pq.PipelineStatus.OFF:
                self._error = None
                try:
                    self._sync()
                except psycopg.OperationalError:
                    raise
                except psycopg.DatabaseError:
                    pass  # the error the transaction failed with, reported again
                self._leave()
        except Exception:
            self.active = False
            self._pending.clear()
            self.conn.close()
            raise psycopg.OperationalError("the pipeline could not be drained") from None

    def _sync(self) -> None:
        self.pg.pipeline_sync()
        self._pending.append("sync")
        self._flush()
        while self._pending:
            self._read_one()
        self._raise_error()

    def _leave(self) -> None:
        self.active = False
        self.pg.exit_pipeline_mode()

    # ------------------------------------------------------------------ statements

    def run(self, sql: str, args: Sequence[object] = ()) -> None:
        self._send(sql, args, None)

    def send(self, sql: str, args: Sequence[object] = ()) -> Handle:
        handle = Handle()
        self._send(sql, args, handle)
        return handle

    def rows(self, sql: str, args: Sequence[object] = ()) -> list[_Row]:
        return self.fetch(self.send(sql, args))

    def fetch(self, handle: Handle) -> list[_Row]:
        """Wait for ``handle``'s rows (and everything queued before it)."""
        if not handle.done:
            self.pg.send_flush_request()
            self._flush()
            while not handle.done:
                self._read_one()
                self._raise_error()
        return handle.rows

    def _send(self, sql: str, args: Sequence[object], pending: _Pending) -> None:
        values, formats, oids = encode(args)
        key = (sql, oids)
        name = self._prepared.get(key)
        if name is None:
            text = dollars(sql).encode()  # before the name is kept: it may refuse the SQL
            if len(self._prepared) < _PREPARED_MAX:
                name = f"dex_{next(self._names)}".encode()
                self._prepared[key] = name
            else:
                name = b""  # the unnamed statement, replaced by the next one
            self.pg.send_prepare(name, text, param_types=oids)
            self._pending.append(_Prepare(key))
        self.pg.send_query_prepared(name, values, param_formats=formats, result_format=1)
        self._pending.append(pending)

    # ------------------------------------------------------------------ results

    def _flush(self) -> None:
        sock = self.pg.socket
        while self.pg.flush() == 1:
            readable, _, _ = select.select([sock], [sock], [])
            if readable:
                self.pg.consume_input()

    def _result(self) -> PGresult | None:
        # read the socket only when what libpq holds does not make a whole result (a read
        # that finds nothing costs a system call for naught)
        pg = self.pg
        while pg.is_busy():
            select.select([pg.socket], [], [])
            pg.consume_input()
        return pg.get_result()

    def _read_one(self) -> None:
        """Read one result, or the end marker of the oldest statement's results.

        A statement's rows are recorded as soon as its result arrives; its end marker may
        need the next statement's messages, so :meth:`fetch` does not wait for it. A
        failed statement gets no end marker in pipeline mode; one that came anyway, like
        any end marker before a statement's first result, is skipped.
        """
        res = self._result()
        pending = self._pending[0]
        if res is None:
            if self._head_seen:
                self._pending.popleft()
                self._head_seen = False
            return
        status = res.status
        if status == _SYNC:
            if pending != "sync":
                raise _LostPlace("a sync arrived for a statement")
            self._pending.popleft()
            return
        if pending == "sync":
            raise _LostPlace("a statement's result arrived for the sync")
        self._head_seen = True
        if isinstance(pending, Handle):
            pending.done = True
        if status == pq.ExecStatus.FATAL_ERROR:
            if self._error is None:
                self._error = res
            self._pending.popleft()
            self._head_seen = False
        elif isinstance(pending, Handle):
            if status == _TUPLES_OK:
                pending.rows = decode(res)
        elif status not in (_COMMAND_OK, _TUPLES_OK, pq.ExecStatus.PIPELINE_ABORTED):
            raise Unsupported(f"a result of status {pq.ExecStatus(status).name}")
        if isinstance(pending, _Prepare) and status != _COMMAND_OK:
            self._prepared.pop(pending.key, None)  # never prepared

    def _raise_error(self) -> None:
        res, self._error = self._error, None
        if res is None:
            return
        sqlstate = res.error_field(pq.DiagnosticField.SQLSTATE)
        state = sqlstate.decode() if sqlstate else ""
        if state in ("26000", "0A000"):
            # a prepared statement is gone (DEALLOCATE), or its result type changed with
            # the schema: prepare every statement again under new names
            self._prepared.clear()
        message = (res.error_message or b"").decode(errors="replace").strip()
        try:
            cls: type[psycopg.Error] = pg_errors.lookup(state)
        except KeyError:
            cls = psycopg.DatabaseError
        raise cls(message)


class _Sent:
    """A statement the search repository sent through the pipeline (rows on demand)."""

    def __init__(self, pipe: Pipeline, handle: Handle) -> None:
        self._pipe = pipe
        self._handle = handle

    def fetchall(self) -> list[_Row]:
        return self._pipe.fetch(self._handle)

    def fetchone(self) -> _Row | None:
        rows = self._pipe.fetch(self._handle)
        return rows[0] if rows else None


class SearchLink:
    """The search repository's connection: the writer's pipeline while it is active."""

    def __init__(self, conn: psycopg.Connection[Any], pipe: Pipeline) -> None:
        self._conn = conn
        self._pipe = pipe

    def execute(self, sql: Any, params: Any = (), /) -> Any:
        if self._pipe.active:
            return _Sent(self._pipe, self._pipe.send(sql, params))
        return self._conn.execute(sql, params)

    def cursor(self) -> Any:
        if self._pipe.active:
            raise Unsupported("COPY and cursors in the bare pipeline")
        return self._conn.cursor()
