"""The caches of the request path (issue #9) never outlive what they cache: a retired dataset is
refused at once, a refreshed one is read under its new version, a disabled principal or a
rotated key is refused at once in this process, and staleness from other processes is bounded
by the TTL."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

import dpmine
from dpmine_server.db.models import Dataset, Principal
from dpmine_server.services import principals
from dpmine_server.services.container import Services
from dpmine_server.services.principals import PrincipalCache, hash_key
from support.inprocess import bearer, expect_error

COUNT = {"epsilon": 0.01}


def _count(client: TestClient, dataset_id: str, key: str) -> Any:
    return client.post(f"/v1/datasets/{dataset_id}/counts", json=COUNT, headers=bearer(key))


class TestDatasetMetadataCache:
    def test_a_retired_dataset_is_refused_at_once(
        self, client: TestClient, toy: str, analyst_key: str, owner: dpmine.Connection
    ) -> None:
        assert _count(client, toy, analyst_key).status_code == 200  # metadata now cached
        owner.admin.retire_dataset(toy)
        expect_error(_count(client, toy, analyst_key), 404, "NotFound")

    def test_retired_by_another_process_is_refused_at_once(
        self, client: TestClient, toy: str, analyst_key: str, services: Services
    ) -> None:
        assert _count(client, toy, analyst_key).status_code == 200
        with services.sessions() as session, session.begin():  # as the CLI would, elsewhere
            session.execute(update(Dataset).where(Dataset.id == toy).values(status="retired"))
        expect_error(_count(client, toy, analyst_key), 404, "NotFound")

    def test_a_new_version_is_parsed_and_charged_under_its_version(
        self, client: TestClient, toy: str, analyst_key: str, services: Services
    ) -> None:
        assert _count(client, toy, analyst_key).status_code == 200
        parsed = services.datasets._parsed
        assert (toy, 1) in parsed
        with services.sessions() as session, session.begin():
            session.execute(update(Dataset).where(Dataset.id == toy).values(version=2))
        # Version 2 has no files: the load after the charge fails, but the lookup used v2.
        _count(client, toy, analyst_key)
        assert (toy, 2) in parsed


class TestPrincipalCache:
    def test_disabling_refuses_a_cached_key_at_once(
        self, client: TestClient, toy: str, analyst_key: str, owner: dpmine.Connection
    ) -> None:
        assert _count(client, toy, analyst_key).status_code == 200  # key now cached
        owner.admin.disable("alice")
        expect_error(_count(client, toy, analyst_key), 401, "Unauthorized")

    def test_rotating_refuses_the_old_key_at_once(
        self, client: TestClient, toy: str, analyst_key: str, owner: dpmine.Connection
    ) -> None:
        assert _count(client, toy, analyst_key).status_code == 200
        new_key = owner.admin.rotate_key("alice").api_key
        expect_error(_count(client, toy, analyst_key), 401, "Unauthorized")
        assert _count(client, toy, new_key).status_code == 200

    def test_another_process_is_seen_within_the_ttl(
        self, client: TestClient, toy: str, analyst_key: str, services: Services, app: Any
    ) -> None:
        assert _count(client, toy, analyst_key).status_code == 200
        cache: PrincipalCache = app.state.principal_cache
        with services.sessions() as session, session.begin():  # as the CLI would
            session.execute(
                update(Principal).where(Principal.name == "alice").values(disabled=True)
            )
        # Within the TTL the cached principal is still served (documented staleness)...
        assert _count(client, toy, analyst_key).status_code == 200
        # ...and once the entry expires the database decides again.
        cache._entries.clear()
        expect_error(_count(client, toy, analyst_key), 401, "Unauthorized")

    def test_the_cache_keys_on_the_hmac_and_expires(self, services: Services) -> None:
        cache = PrincipalCache(ttl_s=0.05, max_entries=2)
        principal = Principal(id=1, name="x", role="analyst", key_prefix="dpm_", key_hash="h")
        key_hash = hash_key("dpm_secret", secret=services.settings.secret_key)
        cache.put(key_hash, principal, cache.generation())
        assert "dpm_secret" not in cache._entries
        assert cache.get(key_hash) is principal
        time.sleep(0.06)
        assert cache.get(key_hash) is None
        for index in range(3):  # bounded
            cache.put(f"h{index}", principal, cache.generation())
        assert len(cache._entries) == 2

    def test_an_entry_read_before_a_revocation_is_not_stored(self) -> None:
        cache = PrincipalCache(ttl_s=60, max_entries=10)
        principal = Principal(id=1, name="x", role="analyst", key_prefix="dpm_", key_hash="h")
        generation = cache.generation()
        principals._revoke_cached()  # a disable/rotate committed while the row was being read
        cache.put("h", principal, generation)
        assert cache.get("h") is None
