"""The workspace's database: SQLite in WAL mode under the workspace, shared by the UI, the CLI and the detached
processes. What it holds is the subclass's (backend.runs.store.RunStore: runs, metrics, samples and the tables
other packages register); here is opening it (made now, at first use or never; read-only when it cannot be
written), one connection per thread and process, a full disk named, and the change counter pages poll.
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable


class WorkspaceError(ValueError):
    """A workspace folder the store cannot use; the message names it, says why and what to do."""


class StoreFull(OSError):
    """A write the store's disk has no room for; the message names the database and what to do."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


# Kept free on the store's disk for the writes that record how runs ended: when a write fails for want of space,
# this file is deleted and the write tried once more, so a run on a full disk still ends `failed`, saying why.
RESERVE_NAME = "workbench.db-reserve"
_RESERVE_BYTES = 2 * 2**20


class WorkspaceDatabase:
    """The subclass says what the database holds: SCHEMA (CREATE ... IF NOT EXISTS), `_migrate` for what older
    workspaces lack, `_registered_tables` for other packages' tables (made whenever one is new)."""
    SCHEMA = ""
    NAME = "the workspace database"  # in the message of a full disk
    NOTHING_YET = "nothing in {workspace} yet"  # an insert refused while there is no database
    READABLE = "SELECT 1 FROM sqlite_master LIMIT 1"  # a read that shows a store this user cannot write is usable
    READ_ONLY_USE = "it can be read, not written"  # what a store this user cannot write is still good for

    def __init__(self, workspace: str | Path, create: str = "now"):
        """create, when the workspace has no database yet: "now" makes it (and the folder); "on_use" at the first
        read or write (a command refused before then leaves nothing behind); "never" reads it as empty and
        writes nothing (a command that only reads; an insert is refused). A folder that could not be used is
        refused at once either way."""
        self.workspace = Path(workspace).resolve()
        self.path = self.workspace / "workbench.db"
        self._local = threading.local()
        self._tables_made: list[str] = []
        self._counting = False  # the change counter's triggers are in place (checked once per store)
        self.read_only = ""  # why the store was opened read-only, e.g. "is on a read-only file system"
        self.absent = ""  # while there is no database: when it is made ("on_use", "never")
        if self._open_read_only():  # its rows can still be listed and shown
            return
        if create != "now" and not self.path.exists():
            self._check_usable()
            self.absent = create
            if create == "never":
                self.read_only = "has no runs yet"  # so commands skip what writes (dispatching)
                self._tables_made = self._registered_tables()  # made with each connection: nothing to write
            return
        self._create()

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Columns added after a workspace was made (the subclass's)."""

    def _registered_tables(self) -> list[str]:
        """Other packages' CREATE ... IF NOT EXISTS statements, made when a store opens (the subclass's)."""
        return []

    def _create(self) -> None:
        """Open the database, making the folder, the tables and the reserve when missing."""
        self._registered_tables()  # a process that may not make them is refused before it writes anything
        self.absent = ""
        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
            with self._connect() as db:
                db.executescript(self.SCHEMA)
                self._migrate(db)
        except (OSError, sqlite3.Error) as e:
            raise self._unusable(e) from None
        self._make_registered_tables()
        self._keep_reserve()

    def _unusable(self, e: OSError | sqlite3.Error) -> WorkspaceError:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if isinstance(e, FileExistsError) or (self.workspace.exists() and not self.workspace.is_dir()):
            why = "it is a file, not a folder"
        return WorkspaceError(f"workspace {self.workspace} cannot be used: {why}; choose a folder this user can "
                              "write (--workspace DIR or WORKBENCH_WORKSPACE)")

    def _check_usable(self) -> None:
        """Refuse, as making the store would, a workspace that is a file or could not be made (/sys/x, another
        user's folder): tried with an empty folder in the nearest one that exists, removed at once."""
        import tempfile

        if self.workspace.exists():
            if not self.workspace.is_dir():
                raise self._unusable(FileExistsError())
            return
        above = next(p for p in self.workspace.parents if p.exists())
        try:
            if not above.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            os.rmdir(tempfile.mkdtemp(prefix=".workspace-check-", dir=above))
        except OSError as e:
            raise self._unusable(e) from None

    def _empty_connection(self) -> sqlite3.Connection:
        """What a workspace without a database reads as: an empty store in memory. Updates and deletes there find
        nothing to change (a command's bookkeeping runs as usual); an insert, which would be lost, is refused."""
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=True)
        db.executescript(self.SCHEMA + "".join(self._tables_made))
        db.set_authorizer(lambda action, *_: sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_INSERT
                          else sqlite3.SQLITE_OK)
        return db

    def _open_read_only(self) -> bool:
        """Open an existing store that this user cannot write (a read-only mount, another user's folder) for
        reading; False when there is none, or it can be written."""
        if not self.path.is_file() or (os.access(self.workspace, os.W_OK) and os.access(self.path, os.W_OK)):
            return False
        read_only_fs = os.statvfs(self.workspace).f_flag & os.ST_RDONLY
        self.read_only = "is on a read-only file system" if read_only_fs else "cannot be written by this user"
        try:
            with self._connect() as db:
                db.execute(self.READABLE).fetchall()
        except (sqlite3.Error, WorkspaceError):
            self.read_only = ""
            return False
        self._tables_made = self._registered_tables()  # made by whoever wrote the store, or missing: nothing to write
        return True

    def _read_only_connection(self) -> sqlite3.Connection:
        """mode=ro reads a WAL store when its -shm file can be used; else immutable=1, which needs none (nothing
        can write a store this user cannot: a read-only mount, or an owner who is not running anything now)."""
        from urllib.parse import quote

        for flag in ("mode=ro", "immutable=1"):
            db = sqlite3.connect(f"file:{quote(str(self.path))}?{flag}", uri=True, timeout=30, isolation_level=None,
                                 check_same_thread=True)
            try:
                db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                return db
            except sqlite3.Error:
                db.close()
        raise sqlite3.OperationalError(f"unable to open {self.path} for reading")

    def _keep_reserve(self) -> None:
        """Write the reserve file when it is missing and the disk has room to spare."""
        reserve = self.workspace / RESERVE_NAME
        try:
            if not reserve.exists() and shutil.disk_usage(self.workspace).free > 32 * _RESERVE_BYTES:
                with open(reserve, "wb") as f:
                    f.write(bytes(_RESERVE_BYTES))  # real blocks: a sparse file frees nothing
        except OSError:
            reserve.unlink(missing_ok=True)

    def with_reserve(self, write: Callable[[], object]):
        """Run `write`; when the disk is full, free the reserve and run it once more."""
        try:
            return write()
        except StoreFull:  # another process may have freed the reserve just now: the retry may still fit
            (self.workspace / RESERVE_NAME).unlink(missing_ok=True)
            return write()

    def _make_registered_tables(self) -> None:
        """Other packages' tables, including those registered after this store was opened; then the change
        counter's triggers over every table."""
        wanted = self._registered_tables()
        with self._connect() as db:
            made = [tables for tables in wanted if tables not in self._tables_made]
            for tables in made:
                db.executescript(tables)
                self._tables_made.append(tables)
            if made or not self._counting:
                _count_changes(db)
                self._counting = True

    @contextmanager
    def _connect(self):
        """This thread's connection, opened once: a training step pays microseconds, not a reconnect."""
        local = self._local
        if self.absent == "on_use":  # first use: make it now
            self._create()
        if getattr(local, "pid", None) != os.getpid():  # never reuse a connection across fork
            if self.absent:
                db = self._empty_connection()
            elif self.read_only:
                db = self._read_only_connection()
            else:
                db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=True)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA busy_timeout=30000")
            local.db, local.pid = db, os.getpid()
        try:
            yield local.db
        except sqlite3.DatabaseError as e:
            code = getattr(e, "sqlite_errorcode", None)
            if self.absent and code == sqlite3.SQLITE_AUTH:
                raise WorkspaceError(self.NOTHING_YET.format(workspace=self.workspace)) from None
            if not isinstance(e, sqlite3.OperationalError):
                raise
            if self.read_only and code is not None and code & 0xFF == sqlite3.SQLITE_READONLY:
                raise WorkspaceError(f"workspace {self.workspace} {self.read_only}: {self.READ_ONLY_USE}; make it "
                                     "writable, or use another folder (--workspace DIR or WORKBENCH_WORKSPACE)"
                                     ) from None
            if code != sqlite3.SQLITE_FULL:
                raise
            free = shutil.disk_usage(self.workspace).free / 2**20
            raise StoreFull(errno.ENOSPC, f"the disk holding {self.NAME} {self.path} is full ({free:.0f} MiB "
                                          "free): free some space; what was saved before is kept") from None

    def connect(self):
        """A connection for reads (a context manager); writes that read first use `transaction`."""
        return self._connect()

    @contextmanager
    def transaction(self):
        """An IMMEDIATE transaction: serialises writers that read-then-write (the queue dispatcher)."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # a COMMIT that failed (a full disk) may have rolled back already
                    db.execute("ROLLBACK")
                raise


CHANGES_TABLE = "store_changes"
BEAT_EVERY_S = 15  # a heartbeat moves the change counter at most this often (a page's elapsed times stay fresh)


def _count_changes(db: sqlite3.Connection) -> None:
    """Keep CHANGES_TABLE's one number moving on every write that a page may show, and not on heartbeats.
    SQLite's data_version moves on any commit, and live processes write a heartbeat every HEARTBEAT_S: a page
    that polled on it redrew every second while a run loaded, and took the CPU the run needed. Triggers on every
    table: an insert or delete, an update of any column but a *beat_at one; a heartbeat once per BEAT_EVERY_S."""
    bump = f"BEGIN UPDATE {CHANGES_TABLE} SET n = n + 1; END"
    db.execute(f"CREATE TABLE IF NOT EXISTS {CHANGES_TABLE} (n INTEGER NOT NULL)")
    wanted = {}
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE "
                                       "'sqlite_%' AND name != ?", (CHANGES_TABLE,))]
    for table in tables:
        columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        shown = [c for c in columns if not c.endswith("beat_at")]
        wanted[f"changes_{table}_insert"] = f"AFTER INSERT ON {table} {bump}"
        wanted[f"changes_{table}_delete"] = f"AFTER DELETE ON {table} {bump}"
        # named by its columns: a column a migration adds gets a new trigger in place of the old one
        key = hashlib.sha1(",".join(shown).encode()).hexdigest()[:8]
        wanted[f"changes_{table}_update_{key}"] = f"AFTER UPDATE OF {', '.join(shown)} ON {table} {bump}"
        for c in columns:
            if c.endswith("beat_at"):
                wanted[f"changes_{table}_{c}"] = (
                    f"AFTER UPDATE OF {c} ON {table} WHEN CAST(NEW.{c} / {BEAT_EVERY_S} AS INTEGER) IS NOT "
                    f"CAST(OLD.{c} / {BEAT_EVERY_S} AS INTEGER) {bump}")
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger' AND name LIKE 'changes!_%' "
                                     "ESCAPE '!'")}
    if have == set(wanted) and db.execute(f"SELECT 1 FROM {CHANGES_TABLE}").fetchone():
        return
    db.execute("BEGIN IMMEDIATE")  # two processes opening one store at once make them once
    try:
        if not db.execute(f"SELECT 1 FROM {CHANGES_TABLE}").fetchone():
            db.execute(f"INSERT INTO {CHANGES_TABLE} (n) VALUES (0)")
        for name in have - set(wanted):
            db.execute(f"DROP TRIGGER IF EXISTS {name}")
        for name, body in wanted.items():
            db.execute(f"CREATE TRIGGER IF NOT EXISTS {name} {body}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def changes(db: sqlite3.Connection) -> int | None:
    """The change counter (None in a store made before it, until a writer opens it)."""
    try:
        row = db.execute(f"SELECT n FROM {CHANGES_TABLE}").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None
