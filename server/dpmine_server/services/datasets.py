"""Datasets: registration from files or SQL, public metadata, grants, and the in-memory cache.

Files are copied under ``data_dir/datasets/<id>/v<version>/`` at registration, so a dataset
version never changes under the ledger. An SQL source is read once, validated and kept there as
a snapshot (``snapshot.csv``): operations never read a live source, which could have changed
since (more rows than ``n_max``, undeclared values) and fail after the charge. The owner's
:meth:`DatasetService.refresh` re-reads the source, validates it, and creates the next version.
Contents are loaded into a columnar :class:`~dpmine_server.data.columns.ColumnStore` on first
use, keyed by (id, version). The parsed public metadata of the request path is cached the same
way (:meth:`DatasetService.served_for_analyst`): a version never changes, and status and
version come from the row read on every request, so a retired dataset is refused at once and a
refreshed one is read under its new version.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from pydantic import TypeAdapter
from sqlalchemy import bindparam, event, select, update
from sqlalchemy.orm import Session, sessionmaker

from dpmine.wire import (
    DATASET_ID_RULE,
    AccountingUnit,
    CreateDatasetRequest,
    CsvPairSource,
    CsvSource,
    DatasetCap,
    DatasetInfo,
    DatasetMetadata,
    DatasetSource,
    FimiSource,
    GrantInfo,
    GuaranteePolicy,
    SqlSource,
    is_dataset_id,
)
from dpmine_server.data.cache import DatasetCache
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.loaders import (
    SNAPSHOT_FILE,
    DataValidationError,
    LoadReport,
    load_store,
    snapshot_sql,
)
from dpmine_server.data.packed import (
    PACKED_DIR,
    PackedFormatError,
    available_memory,
    fit_problem,
    map_packed,
    packed_bytes_bound,
    write_packed,
)
from dpmine_server.db.base import rows_affected
from dpmine_server.db.models import Dataset, Grant, Principal, utcnow
from dpmine_server.dp.budget import BudgetError, Epsilon, Rho, ledger_amount
from dpmine_server.dp.zcdp import DEFAULT_DELTA, parse_delta, rho_cap_for
from dpmine_server.errors import Conflict, Forbidden, InvalidRequest, NotFound
from dpmine_server.services.accounting import (
    dataset_delta,
    dataset_unit,
    display_remaining,
    display_total,
    zcdp_amounts,
)
from dpmine_server.services.principals import get_principal

_SOURCE_ADAPTER: TypeAdapter[DatasetSource] = TypeAdapter(DatasetSource)
#: Parsed metadata of this many dataset versions is kept (a few KiB to a few MiB each).
_METADATA_CACHE_SIZE = 64

# The version and guarantee policy of an active dataset the analyst holds a grant on (built once).
_ANALYST_VERSION = (
    select(Dataset.version, Dataset.guarantee_policy, Dataset.accounting, Dataset.accounting_delta)
    .join(Grant, Grant.dataset_id == Dataset.id)
    .where(
        Dataset.id == bindparam("ds_id"),
        Grant.analyst_id == bindparam("analyst"),
        Dataset.status == "active",
    )
)
_VERSION_JSON = select(Dataset.version, Dataset.metadata_json, Dataset.source_json).where(
    Dataset.id == bindparam("ds_id")
)

logger = logging.getLogger(__name__)

#: ``Session.info`` key of the stores registrations loaded, cached once their commit succeeds.
_LOADED_KEY = "dpmine.loaded_stores"


def _drop(session: Session) -> None:
    """After a rollback: the registrations' stores are not kept."""
    session.info.pop(_LOADED_KEY, None)


__all__ = [
    "DatasetService",
    "ServedDataset",
    "StoredFile",
    "dataset_cap",
    "dataset_info",
    "grant_info",
    "stored_policy",
]


def _not_granted(dataset_id: str) -> NotFound:
    """The one answer for unknown, retired and not-granted datasets (they must look alike);
    an id that breaks the public id rule says so (it cannot name any dataset)."""
    return NotFound(
        f"dataset {dataset_id!r} does not exist or is not granted to you; list datasets to see "
        f"yours{_id_rule_hint(dataset_id)}"
    )


def _id_rule_hint(dataset_id: str) -> str:
    """`` (a dataset id has …)`` when ``dataset_id`` breaks the public id rule, else nothing."""
    return "" if is_dataset_id(dataset_id) else f" (a dataset id has {DATASET_ID_RULE})"


@dataclass(frozen=True, slots=True)
class _ParsedVersion:
    """The validated public metadata of one dataset version and whether its source is SQL."""

    metadata: DatasetMetadata
    sql_source: bool


@dataclass(frozen=True, slots=True)
class ServedDataset:
    """What a call on a dataset is checked against, both public: the metadata of its current
    version and the owner's guarantee policy (read on every call, so a change applies at once)."""

    metadata: DatasetMetadata
    guarantee_policy: GuaranteePolicy
    accounting: AccountingUnit = "pure"
    #: zCDP: the delta its rho is shown at, and whether it is the public default.
    delta: tuple[Decimal, bool] = (DEFAULT_DELTA, True)


def stored_policy(value: str) -> GuaranteePolicy:
    """A stored guarantee policy. Only the two values are ever written; anything else would be
    read as the stricter one (a privacy switch fails closed)."""
    return "allow_approximate" if value == "allow_approximate" else "pure_only"


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file handed in for registration: where it is now and the name to keep it under.
    ``movable``: the server's own temporary copy (an upload), moved into the dataset's folder
    instead of copied (a 2.3 GB upload's copy took 7 s)."""

    path: Path
    name: str
    movable: bool = False


def dataset_info(dataset: Dataset) -> DatasetInfo:
    """Wire view of a dataset: public metadata only."""
    return DatasetInfo(
        id=dataset.id,
        name=dataset.name,
        description=dataset.description,
        attribution=dataset.attribution,
        version=dataset.version,
        status="retired" if dataset.status == "retired" else "active",
        guarantee_policy=stored_policy(dataset.guarantee_policy),
        accounting=dataset_unit(dataset),
        metadata=DatasetMetadata.model_validate(dataset.metadata_json),
        created_at=dataset.created_at,
    )


def dataset_cap(dataset: Dataset) -> DatasetCap:
    """Wire view of a dataset's cap and spending (owners only)."""
    unit = dataset_unit(dataset)
    left = dataset.cap_units - dataset.spent_units
    if unit == "pure":
        cap_exact = Epsilon(dataset.cap_units).exact_str()
        spent_exact = Epsilon(dataset.spent_units).exact_str()
    else:  # what the rho implies, for reading (the exact amounts are in ``zcdp``)
        cap_exact = repr(display_total(dataset, dataset.cap_units))
        spent_exact = repr(display_total(dataset, dataset.spent_units))
    return DatasetCap(
        dataset_id=dataset.id,
        status="retired" if dataset.status == "retired" else "active",
        epsilon_cap=display_total(dataset, dataset.cap_units),
        spent=display_total(dataset, dataset.spent_units),
        remaining=display_remaining(unit, left),
        epsilon_cap_exact=cap_exact,
        spent_exact=spent_exact,
        accounting=unit,
        zcdp=zcdp_amounts(dataset, dataset.cap_units, spent=dataset.spent_units, remaining=left),
    )


def grant_info(grant: Grant, analyst_name: str, dataset: Dataset) -> GrantInfo:
    """Wire view of a grant, in its dataset's unit."""
    left = grant.limit_units - grant.spent_units
    return GrantInfo(
        analyst=analyst_name,
        dataset_id=grant.dataset_id,
        epsilon=display_total(dataset, grant.limit_units),
        spent=display_total(dataset, grant.spent_units),
        remaining=display_remaining(dataset_unit(dataset), left),
        accounting=dataset_unit(dataset),
        zcdp=zcdp_amounts(dataset, grant.limit_units, spent=grant.spent_units, remaining=left),
    )


class DatasetService:
    """Registration, lookup and loading of datasets."""

    def __init__(
        self,
        *,
        data_dir: Path,
        sessions: sessionmaker[Session],
        allow_sql: bool,
        max_cached: int = 16,
        load_padding: Callable[[DatasetMetadata], float] | None = None,
    ) -> None:
        self._data_dir = data_dir
        self._load_padding = load_padding
        self._sessions = sessions
        self._allow_sql = allow_sql
        self._cache = DatasetCache(self._load_version, max_entries=max_cached)
        self._parsed: OrderedDict[tuple[str, int], _ParsedVersion] = OrderedDict()
        self._parsed_lock = threading.Lock()

    # -- registration --------------------------------------------------------------------------

    def register(
        self,
        session: Session,
        request: CreateDatasetRequest,
        *,
        files: dict[str, StoredFile] | None = None,
    ) -> tuple[DatasetInfo, LoadReport]:
        """Validate the source against the metadata, keep the files, create version 1.

        ``files`` maps the source's path fields ("path", "left", "right") to files on this
        machine; they are copied into the dataset's folder and the source is rewritten to the
        copies. Without ``files`` a file source must already name files inside the data folder.
        A proposal's owner-only ``review`` (its notes name the data's columns and problems) is
        never stored, whoever calls: the routes have already refused an unreviewed one.
        """
        if request.metadata.review is not None:
            request = request.model_copy(
                update={"metadata": request.metadata.model_copy(update={"review": None})}
            )
        cap, delta = _registration_cap(request)
        with self._sessions() as lookup:  # a short read, before any file is written
            if lookup.get(Dataset, request.id) is not None:
                raise Conflict(f"dataset id {request.id!r} is taken; choose another id")
        if isinstance(request.source, SqlSource) and not self._allow_sql:
            raise Forbidden("this server does not accept SQL sources (DPMINE_ALLOW_SQL_SOURCES)")
        version_dir = self._version_dir(request.id, 1)
        source, load_dir, moves = self._store_files(request.source, files or {}, version_dir)
        try:
            self._check_fits(request.metadata, source, load_dir)
            if isinstance(source, SqlSource):
                parsed, report = snapshot_sql(request.metadata, source, version_dir)
            else:
                parsed, report = load_store(request.metadata, source, base_dir=load_dir)
            for received, target in moves:  # loaded: the uploads join the dataset's folder
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(received, target)
            # No committed dataset has this id: packed columns left here by a registration
            # that was rolled back are another table's, never to be mapped.
            shutil.rmtree(version_dir / PACKED_DIR, ignore_errors=True)
            loaded = self._pack(parsed, request.metadata, version_dir)
            del parsed  # the parsed arrays go; the process keeps the mapped ones
        except DataValidationError as error:
            shutil.rmtree(version_dir, ignore_errors=True)
            raise InvalidRequest(str(error)) from error
        except BaseException:
            shutil.rmtree(version_dir, ignore_errors=True)
            raise
        # The caller's session is touched only now, so a slow load never holds a write lock.
        dataset = Dataset(
            id=request.id,
            name=request.name,
            description=request.description,
            attribution=request.attribution,
            kind=request.metadata.kind,
            metadata_json=request.metadata.model_dump(mode="json"),
            source_json=source.model_dump(mode="json"),
            version=1,
            status="active",
            cap_units=cap.units,
            spent_units=0,
            guarantee_policy=request.guarantee_policy,
            accounting=request.accounting,
            accounting_delta=None if delta is None else str(delta),
            created_at=utcnow(),
        )
        session.add(dataset)
        session.flush()
        # Resident from the start (no first request pays the load), once the registration is
        # committed: a rolled-back one must not leave its contents under the id.
        session.info.setdefault(_LOADED_KEY, []).append((request.id, 1, loaded))
        for name, listener in (("after_commit", self._keep_loaded), ("after_rollback", _drop)):
            if not event.contains(session, name, listener):
                event.listen(session, name, listener)
        return dataset_info(dataset), report

    def refresh(self, session: Session, dataset_id: str) -> tuple[DatasetInfo, LoadReport]:
        """Re-read an SQL dataset's source, validate it and keep it as the next version.

        The public metadata, cap, grants and ledger stay; entries record the version they were
        charged against, and calls charged before the refresh still read their version. A
        source that no longer matches the metadata is refused (InvalidRequest, owner-only
        message) and the current version stays.
        """
        with self._sessions() as lookup:  # a short read: the slow load holds no write lock
            dataset = self.get(lookup, dataset_id)
            if dataset.status != "active":
                raise InvalidRequest(f"dataset {dataset_id!r} is retired; it cannot be refreshed")
            source = _SOURCE_ADAPTER.validate_python(dataset.source_json)
            metadata = DatasetMetadata.model_validate(dataset.metadata_json)
            current = dataset.version
        if not isinstance(source, SqlSource):
            raise InvalidRequest(
                f"dataset {dataset_id!r} comes from stored files; only datasets with an SQL "
                "source can be refreshed (register new files as a new dataset)"
            )
        if not self._allow_sql:
            raise Forbidden("this server does not accept SQL sources (DPMINE_ALLOW_SQL_SOURCES)")
        staging = self._version_dir(dataset_id, current + 1).with_name(
            f".refresh-{uuid.uuid4().hex}"
        )
        try:
            self._check_fits(metadata, source, staging)
            parsed, report = snapshot_sql(metadata, source, staging)
            write_packed(parsed, staging)
            del parsed
            # The caller's session is touched only now; the version moves only if no one else
            # refreshed meanwhile (a conditional update: row lock / immediate transaction).
            moved = session.execute(
                update(Dataset)
                .where(Dataset.id == dataset_id, Dataset.version == current)
                .values(version=current + 1)
                .execution_options(synchronize_session=False)
            )
            if getattr(moved, "rowcount", 0) != 1:
                raise Conflict(f"dataset {dataset_id!r} changed meanwhile; refresh it again")
            # No entry can be charged against the new version before this commits, so a folder
            # left there by a refresh whose commit failed is replaced.
            target = self._version_dir(dataset_id, current + 1)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        except DataValidationError as error:
            raise InvalidRequest(str(error)) from error
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        refreshed = session.get(Dataset, dataset_id, populate_existing=True)
        assert refreshed is not None
        return dataset_info(refreshed), report

    def _check_fits(self, metadata: DatasetMetadata, source: DatasetSource, folder: Path) -> None:
        """Refuse, before anything is parsed, a version whose load or packed columns would not
        fit this machine (bounds from the declared ``n_max``; for a FIMI file, also from its
        size: a row index per at least two bytes of text)."""
        occurrences = None
        if isinstance(source, FimiSource) and not source.path.endswith(".gz"):
            path = folder / source.path
            occurrences = path.stat().st_size // 2 + 1 if path.is_file() else None
        self._data_dir.mkdir(parents=True, exist_ok=True)
        problem = fit_problem(
            packed_bytes_bound(metadata, occurrences=occurrences),
            memory=available_memory(),
            disk=shutil.disk_usage(self._data_dir).free,
        )
        if problem is not None:
            raise DataValidationError(f"this dataset does not fit this server: {problem}")

    @staticmethod
    def _pack(store: ColumnStore, metadata: DatasetMetadata, version_dir: Path) -> ColumnStore:
        """Write a freshly parsed store's packed columns (once) and map them back: the store a
        process keeps is the mapped one, whose pages the other processes share."""
        wrote = write_packed(store, version_dir)
        # Files this call wrote were read back for their checksums already; a folder another
        # process wrote meanwhile is verified as any other.
        mapped = map_packed(metadata, version_dir, check_crc=not wrote)
        if mapped is None:  # written just above, or by another process meanwhile
            raise PackedFormatError(f"the packed columns in {version_dir} vanished")
        return mapped

    def _version_dir(self, dataset_id: str, version: int) -> Path:
        return (self._data_dir / "datasets" / dataset_id / f"v{version}").resolve()

    def _store_files(
        self, source: DatasetSource, files: dict[str, StoredFile], version_dir: Path
    ) -> tuple[DatasetSource, Path, list[tuple[Path, Path]]]:
        """The source as stored (its path fields renamed to the dataset folder's files), the
        folder to load it from, and the moves (from, to) to make once it has loaded.

        When every file of the source is an upload (``movable``) received in one folder, the
        files are renamed to their stored names inside that folder and loaded from there; they
        move into ``version_dir`` only once loaded, so a crash meanwhile leaves them in
        ``uploads/``, whose sweep removes them (and an upload still arriving is read where it is
        written). Otherwise each file is moved (an upload) or copied into ``version_dir`` first.
        """
        if isinstance(source, SqlSource):
            if files:
                raise InvalidRequest("an SQL source takes no uploaded files")
            return source, version_dir, []
        fields = {
            CsvSource: ("path",),
            FimiSource: ("path",),
            CsvPairSource: ("left", "right"),
        }[type(source)]
        updates: dict[str, str] = {}
        received: list[tuple[StoredFile, str]] = []
        for field in fields:
            stored = files.get(field)
            if stored is None:
                path = (version_dir / getattr(source, field)).resolve()
                if not path.is_relative_to(self._data_dir.resolve()) or not path.is_file():
                    raise InvalidRequest(
                        f"source field {field!r}: upload the file (no stored file "
                        f"{getattr(source, field)!r} for this dataset)"
                    )
                continue
            name = Path(stored.name).name
            if not name or name.startswith("."):
                raise InvalidRequest(f"file for {field!r} needs a plain file name")
            updates[field] = f"{field}-{name}"
            received.append((stored, updates[field]))
        stored_source = source.model_copy(update=updates)
        folders = {stored.path.parent for stored, _name in received}
        if (
            len(received) == len(fields)
            and len(folders) == 1
            and all(stored.movable for stored, _name in received)
        ):
            (upload_dir,) = folders
            moves = []
            for stored, name in received:
                os.replace(stored.path, upload_dir / name)  # a rename inside the upload folder
                moves.append((upload_dir / name, version_dir / name))
            return stored_source, upload_dir, moves
        if received:
            version_dir.mkdir(parents=True, exist_ok=True)
        for stored, name in received:
            if stored.movable:
                shutil.move(stored.path, version_dir / name)  # a rename on the same file system
            else:
                shutil.copyfile(stored.path, version_dir / name)
        return stored_source, version_dir, []

    # -- lookup --------------------------------------------------------------------------------

    @staticmethod
    def get(session: Session, dataset_id: str) -> Dataset:
        """The dataset row (owners see retired ones too)."""
        dataset = session.get(Dataset, dataset_id)
        if dataset is None:
            raise NotFound(
                f"no dataset {dataset_id!r}; list datasets to see the ids"
                f"{_id_rule_hint(dataset_id)}"
            )
        return dataset

    @staticmethod
    def get_for_analyst(session: Session, dataset_id: str, analyst: Principal) -> Dataset:
        """An active dataset the analyst holds a grant on (else NotFound, same message).

        One query for every case: an unknown, a retired and a not-granted dataset take the same
        path through the code (a second query for existing datasets only was measurable).
        """
        dataset = session.scalar(
            select(Dataset)
            .join(Grant, Grant.dataset_id == Dataset.id)
            .where(
                Dataset.id == dataset_id,
                Grant.analyst_id == analyst.id,
                Dataset.status == "active",
            )
        )
        if dataset is None:
            raise _not_granted(dataset_id)
        return dataset

    def served_for_analyst(
        self, session: Session, dataset_id: str, analyst: Principal
    ) -> ServedDataset:
        """The public metadata and guarantee policy of an active dataset the analyst holds a
        grant on, checked like :meth:`get_for_analyst` (same NotFound); an SQL dataset without a
        snapshot for its version (registered before snapshots existed) is refused before any
        charge.

        One indexed query for the version and policy on every call (status, grant and policy
        are never cached); the parsed metadata is cached per (id, version), which never changes.
        """
        row = session.execute(
            _ANALYST_VERSION, {"ds_id": dataset_id, "analyst": analyst.id}
        ).one_or_none()
        if row is None:
            raise _not_granted(dataset_id)
        version = int(row.version)
        parsed = self._parsed_version(session, dataset_id, int(version))
        if parsed.sql_source:
            snapshot = self._version_dir(dataset_id, version) / SNAPSHOT_FILE
            if not snapshot.is_file():
                raise InvalidRequest(
                    f"dataset {dataset_id!r} reads an SQL source that has no snapshot for "
                    f"version {version} yet; ask the owner to run `dpmine-server datasets "
                    f"refresh {dataset_id}` (nothing was charged)"
                )
        accounting: AccountingUnit = "zcdp" if row.accounting == "zcdp" else "pure"
        delta = (
            (DEFAULT_DELTA, True)
            if row.accounting_delta is None
            else (Decimal(row.accounting_delta), False)
        )
        return ServedDataset(
            parsed.metadata, stored_policy(row.guarantee_policy), accounting, delta
        )

    def public_metadata(self, session: Session, dataset_id: str) -> DatasetMetadata:
        """The current version's public metadata (no grant check), through the per-version
        cache: for the padding budgets of requests and jobs, which read it on every answer."""
        version = self.current_version(session, dataset_id)
        if version is None:
            raise _not_granted(dataset_id)
        return self._parsed_version(session, dataset_id, version).metadata

    def version_metadata(self, session: Session, dataset_id: str, version: int) -> DatasetMetadata:
        """The public metadata of a known version (cached; read once per process and version),
        when the caller has read :meth:`current_version` already."""
        return self._parsed_version(session, dataset_id, version).metadata

    def _parsed_version(self, session: Session, dataset_id: str, version: int) -> _ParsedVersion:
        key = (dataset_id, version)
        with self._parsed_lock:
            parsed = self._parsed.get(key)
            if parsed is not None:
                self._parsed.move_to_end(key)
                return parsed
        row = session.execute(_VERSION_JSON, {"ds_id": dataset_id}).one_or_none()
        if row is None:
            raise _not_granted(dataset_id)
        parsed = _ParsedVersion(
            metadata=DatasetMetadata.model_validate(row.metadata_json),
            sql_source=isinstance(_SOURCE_ADAPTER.validate_python(row.source_json), SqlSource),
        )
        if row.version == version:  # else refreshed meanwhile: same metadata, not cached
            with self._parsed_lock:
                self._parsed[key] = parsed
                while len(self._parsed) > _METADATA_CACHE_SIZE:
                    self._parsed.popitem(last=False)
        return parsed

    def _forget_parsed(self, dataset_id: str) -> None:
        with self._parsed_lock:
            for key in [key for key in self._parsed if key[0] == dataset_id]:
                del self._parsed[key]

    @staticmethod
    def list_all(session: Session) -> list[DatasetInfo]:
        """Every dataset, for owners."""
        return [dataset_info(d) for d in session.scalars(select(Dataset).order_by(Dataset.id))]

    @staticmethod
    def list_for_analyst(session: Session, analyst: Principal) -> list[DatasetInfo]:
        """Active datasets the analyst holds a grant on."""
        rows = session.scalars(
            select(Dataset)
            .join(Grant, Grant.dataset_id == Dataset.id)
            .where(Grant.analyst_id == analyst.id, Dataset.status == "active")
            .order_by(Dataset.id)
        )
        return [dataset_info(d) for d in rows]

    def cap(self, session: Session, dataset_id: str) -> DatasetCap:
        """A dataset's cap and spending (owners)."""
        return dataset_cap(self.get(session, dataset_id))

    def set_cap(self, session: Session, dataset_id: str, epsilon_cap: float) -> DatasetCap:
        """Change an active dataset's cap; never below what was spent. One conditional UPDATE,
        so a charge committing meanwhile cannot leave the spending above the new cap (the
        ledger's charges are conditional on the cap in the same way). On a zCDP dataset the
        new cap is ``(epsilon_cap, the dataset's delta)``, stored as the rho it allows."""
        dataset = self.get(session, dataset_id)
        if dataset.status != "active":
            raise InvalidRequest(
                f"dataset {dataset_id!r} is retired and takes no queries; its cap stays"
            )
        cap = _cap_units(epsilon_cap, dataset_unit(dataset), dataset_delta(dataset)[0])
        changed = session.execute(
            update(Dataset)
            .where(Dataset.id == dataset_id, Dataset.spent_units <= cap.units)
            .values(cap_units=cap.units)
            .execution_options(synchronize_session=False)
        )
        session.refresh(dataset)
        if rows_affected(changed) != 1:
            raise InvalidRequest(
                f"dataset {dataset_id!r} has already spent "
                f"{_spent_str(dataset, dataset.spent_units)}; a cap cannot be set below that "
                "(retire the dataset to stop all further queries)"
            )
        return dataset_cap(dataset)

    def set_guarantee_policy(
        self, session: Session, dataset_id: str, policy: GuaranteePolicy
    ) -> DatasetInfo:
        """Change which guarantees an active dataset serves; the next call is checked against
        it (calls already charged keep running: their charge was accepted under the old one)."""
        dataset = self.get(session, dataset_id)
        if dataset.status != "active":
            raise InvalidRequest(
                f"dataset {dataset_id!r} is retired and takes no queries; its policy stays"
            )
        dataset.guarantee_policy = policy
        session.flush()
        return dataset_info(dataset)

    def retire(self, session: Session, dataset_id: str) -> DatasetInfo:
        """Stop all further queries on a dataset (its ledger stays)."""
        dataset = self.get(session, dataset_id)
        dataset.status = "retired"
        session.flush()
        self._cache.evict(dataset_id)
        self._forget_parsed(dataset_id)  # memory only: the status is checked on every request
        return dataset_info(dataset)

    def columns(self, dataset_id: str, version: int) -> ColumnStore:
        """The loaded columns of a dataset version (loaded once, then cached)."""
        return self._cache.get(dataset_id, version)

    def unload(self, dataset_id: str) -> None:
        """Drop this process's loaded store of every version of a dataset; the next request
        loads it again from its stored files (padded like any load inside a request)."""
        self._cache.evict(dataset_id)

    def _keep_loaded(self, session: Session) -> None:
        """After a commit: cache the stores that the session's registrations loaded."""
        for dataset_id, version, store in session.info.pop(_LOADED_KEY, []):
            self._cache.put(dataset_id, version, store)

    @staticmethod
    def current_version(session: Session, dataset_id: str) -> int | None:
        """The dataset's current version (None: no such dataset)."""
        version = session.scalar(select(Dataset.version).where(Dataset.id == dataset_id))
        return None if version is None else int(version)

    def resident_store(self, dataset_id: str, version: int) -> ColumnStore | None:
        """The loaded store of this version in this process, or None; loads nothing and leaves
        the cache's order as it is (residency is public, see :meth:`is_resident`)."""
        return self._cache.peek(dataset_id, version)

    def is_resident(self, dataset_id: str, version: int) -> bool:
        """Whether a request on this version finds it loaded (it then pays no load time)."""
        return self._cache.holds(dataset_id, version)

    def preload(self) -> int:
        """Load every active dataset's current version (at most the cache's size, most recent
        first), so that no request pays a first load; how many were loaded. A dataset that
        fails to load is logged and left to load on first use."""
        with self._sessions() as session:
            rows = session.execute(
                select(Dataset.id, Dataset.version)
                .where(Dataset.status == "active")
                .order_by(Dataset.created_at.desc())
                .limit(self._cache.max_entries)
            ).all()
        loaded = 0
        for dataset_id, version in reversed(rows):
            try:
                self._cache.get(dataset_id, int(version))
            except PackedFormatError:
                raise  # damaged data: the server refuses to start (the message says what to do)
            except Exception:
                logger.exception("dataset %s could not be preloaded", dataset_id)
                continue
            loaded += 1
        return loaded

    def _load_version(self, dataset_id: str, version: int) -> ColumnStore:
        started = time.monotonic()
        with self._sessions() as session:
            dataset = self.get(session, dataset_id)
            metadata = DatasetMetadata.model_validate(dataset.metadata_json)
            source = _SOURCE_ADAPTER.validate_python(dataset.source_json)
        folder = self._version_dir(dataset_id, version)
        store = map_packed(metadata, folder)  # PackedFormatError if damaged
        if store is None:
            # A version registered before the packed format: parsed once more, then packed.
            if isinstance(source, SqlSource):
                # Only the snapshot taken at registration or refresh, never the live source.
                source = CsvSource(path=SNAPSHOT_FILE)
            parsed, _report = load_store(metadata, source, base_dir=folder)
            store = self._pack(parsed, metadata, folder)
            del parsed
        if self._load_padding is not None:
            # A load's time grows with the private row count: padded to a public time.
            time.sleep(max(started + self._load_padding(metadata) - time.monotonic(), 0.0))
        return store

    # -- grants --------------------------------------------------------------------------------

    def set_grant(
        self,
        session: Session,
        dataset_id: str,
        analyst_name: str,
        epsilon: float | None,
        rho: float | None = None,
    ) -> GrantInfo:
        """Create or change an analyst's allotment, in the dataset's unit (``epsilon`` on a pure
        dataset, ``rho`` on a zCDP one); it cannot drop below what was spent."""
        dataset = self.get(session, dataset_id)
        analyst = get_principal(session, analyst_name)
        if analyst.role != "analyst":
            raise InvalidRequest(f"{analyst_name!r} is an owner; grants are for analysts")
        limit = _grant_units(dataset, epsilon, rho)
        grant = session.scalar(
            select(Grant).where(Grant.dataset_id == dataset.id, Grant.analyst_id == analyst.id)
        )
        if grant is None:
            grant = Grant(
                dataset_id=dataset.id,
                analyst_id=analyst.id,
                limit_units=limit,
                spent_units=0,
                updated_at=utcnow(),
            )
            session.add(grant)
        else:
            if limit < grant.spent_units:
                raise InvalidRequest(
                    f"{analyst_name!r} already spent {_spent_str(dataset, grant.spent_units)} "
                    "on this dataset; a grant cannot be set below that"
                )
            grant.limit_units = limit
            grant.updated_at = utcnow()
        session.flush()
        return grant_info(grant, analyst.name, dataset)

    def revoke_grant(self, session: Session, dataset_id: str, analyst_name: str) -> GrantInfo:
        """Stop an analyst's spending on a dataset. A grant with charges shrinks to what was
        spent (it stays: the ledger check sums it); one without charges is deleted."""
        dataset = self.get(session, dataset_id)
        analyst = get_principal(session, analyst_name)
        grant = session.scalar(
            select(Grant).where(Grant.dataset_id == dataset.id, Grant.analyst_id == analyst.id)
        )
        if grant is None:
            raise NotFound(f"{analyst_name!r} holds no grant on dataset {dataset_id!r}")
        if grant.spent_units == 0:
            session.delete(grant)
            session.flush()
            return GrantInfo(
                analyst=analyst.name,
                dataset_id=dataset.id,
                epsilon=0.0,
                spent=0.0,
                remaining=0.0,
                accounting=dataset_unit(dataset),
            )
        grant.limit_units = grant.spent_units
        grant.updated_at = utcnow()
        session.flush()
        return grant_info(grant, analyst.name, dataset)

    @staticmethod
    def list_grants(session: Session, dataset_id: str) -> list[GrantInfo]:
        """All grants on a dataset."""
        dataset = session.get(Dataset, dataset_id)
        if dataset is None:
            return []
        rows = session.execute(
            select(Grant, Principal.name)
            .join(Principal, Principal.id == Grant.analyst_id)
            .where(Grant.dataset_id == dataset_id)
            .order_by(Principal.name)
        ).all()
        return [grant_info(grant, name, dataset) for grant, name in rows]


def _registration_cap(request: CreateDatasetRequest) -> tuple[Epsilon | Rho, Decimal | None]:
    """The stored cap of a new dataset and the owner's delta (zCDP given as (epsilon, delta)).

    The wire model has already checked that exactly one form of cap is given for the unit."""
    if request.accounting == "pure" and request.epsilon_cap is not None:
        return _budget(request.epsilon_cap, "epsilon_cap"), None
    if request.accounting == "zcdp" and request.cap_rho is not None:
        return _budget(request.cap_rho, "cap_rho", Rho), None
    epsilon, delta_given = request.epsilon_cap, request.cap_delta
    if request.accounting == "zcdp" and epsilon is not None and delta_given is not None:
        delta = _delta(delta_given)
        return _zcdp_cap(epsilon, delta), delta
    raise InvalidRequest(
        "give the cap as epsilon_cap (pure), or cap_rho or epsilon_cap with cap_delta (zcdp)"
    )


def _cap_units(value: float, unit: AccountingUnit, delta: Decimal) -> Epsilon | Rho:
    """A new cap given as epsilon: as is on a pure dataset, as the rho it allows at the
    dataset's delta on a zCDP one."""
    if unit == "pure":
        return _budget(value, "epsilon_cap")
    return _zcdp_cap(value, delta)


def _zcdp_cap(epsilon: float, delta: Decimal) -> Rho:
    try:
        return rho_cap_for(epsilon, delta)
    except BudgetError as error:
        raise InvalidRequest(f"epsilon_cap: {error}") from error


def _delta(value: float) -> Decimal:
    try:
        return parse_delta(value)
    except BudgetError as error:
        raise InvalidRequest(f"cap_delta: {error}") from error


def _grant_units(dataset: Dataset, epsilon: float | None, rho: float | None) -> int:
    """A grant's limit in the dataset's unit, or InvalidRequest naming the unit to use."""
    if dataset_unit(dataset) == "zcdp":
        if rho is None or epsilon is not None:
            raise InvalidRequest(
                f"dataset {dataset.id!r} accounts in zCDP: give the grant as rho "
                "(e.g. --rho 0.01), not as epsilon"
            )
        return _budget(rho, "rho", Rho).units
    if epsilon is None or rho is not None:
        raise InvalidRequest(
            f"dataset {dataset.id!r} accounts in pure epsilon: give the grant as epsilon, "
            "not as rho"
        )
    return _budget(epsilon, "epsilon").units


def _spent_str(dataset: Dataset, units: int) -> str:
    """What was spent, as an exact decimal (with "rho=" on a zCDP dataset)."""
    amount = ledger_amount(dataset_unit(dataset), units)
    return f"rho={amount.exact_str()}" if isinstance(amount, Rho) else amount.exact_str()


def _budget(value: float, field: str, unit: type[Epsilon | Rho] = Epsilon) -> Epsilon | Rho:
    try:
        amount = unit.cap(value)
    except BudgetError as error:
        raise InvalidRequest(f"{field}: {error}") from error
    if amount.units == 0:
        raise InvalidRequest(f"{field}: {value} is below the ledger's unit of 1e-12")
    return amount
