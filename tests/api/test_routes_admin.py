"""Owner routes: principals, dataset upload/registration, metadata proposals, retirement,
grants, ledger exports, the audit log, and the OpenAPI document.

DESIGN.md "Who uses it" (the owner's tasks), "The budget ledger" (grants inside the cap, never
below what was spent; exports) and "Errors" (one shape; upload errors name the column).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy
from fastapi import FastAPI
from sqlalchemy import select, update

import dpmine
from dpmine.wire import (
    DATASET_ID_RULE,
    AuditEventInfo,
    BooleanAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetCap,
    DatasetInfo,
    DatasetMetadata,
    GrantInfo,
    LedgerEntryInfo,
    NumericAttribute,
    PrincipalCreated,
    PrincipalInfo,
    SqlSource,
)
from dpmine_server.api import uploads
from dpmine_server.app import create_app
from dpmine_server.db.models import LedgerEntry
from dpmine_server.dp.budget import Epsilon
from dpmine_server.services.container import Services
from dpmine_server.services.ledger import Reservation, request_fingerprint
from dpmine_server.services.principals import get_principal
from dpmine_server.settings import Settings
from support.inprocess import TestClient, bearer, expect_error

#: The conftest's ``register(dataset_id, csv_path, metadata, cap=, grants=)`` fixture.
Register = Callable[..., str]

#: The REST API of the engine foundation (notes/CONTEXT.md); families add more routes.
SPECIFIED_ROUTES = [
    ("GET", "/v1/health"),
    ("GET", "/v1/datasets"),
    ("GET", "/v1/datasets/{dataset_id}"),
    ("GET", "/v1/datasets/{dataset_id}/budget"),
    ("POST", "/v1/datasets/{dataset_id}/estimate"),
    ("POST", "/v1/datasets/{dataset_id}/counts"),
    ("POST", "/v1/datasets/{dataset_id}/redescriptions/quality"),
    ("POST", "/v1/datasets/{dataset_id}/jobs"),
    ("GET", "/v1/jobs/{job_id}"),
    ("POST", "/v1/admin/principals"),
    ("GET", "/v1/admin/principals"),
    ("POST", "/v1/admin/principals/{name}/rotate-key"),
    ("POST", "/v1/admin/principals/{name}/disable"),
    ("POST", "/v1/admin/datasets"),
    ("POST", "/v1/admin/datasets/upload"),
    ("POST", "/v1/admin/datasets/propose-metadata"),
    ("DELETE", "/v1/admin/datasets/{dataset_id}"),
    ("POST", "/v1/admin/datasets/{dataset_id}/refresh"),
    ("PUT", "/v1/admin/datasets/{dataset_id}/grants"),
    ("GET", "/v1/admin/datasets/{dataset_id}/grants"),
    ("GET", "/v1/admin/ledger"),
    ("GET", "/v1/admin/ledger/verify"),
    ("GET", "/v1/admin/audit"),
]
ADMIN_ROUTES = [
    ("POST", "/v1/admin/principals"),
    ("GET", "/v1/admin/principals"),
    ("POST", "/v1/admin/principals/alice/rotate-key"),
    ("POST", "/v1/admin/principals/alice/disable"),
    ("POST", "/v1/admin/datasets"),
    ("POST", "/v1/admin/datasets/upload"),
    ("POST", "/v1/admin/datasets/propose-metadata"),
    ("DELETE", "/v1/admin/datasets/toy"),
    ("POST", "/v1/admin/datasets/toy/refresh"),
    ("PUT", "/v1/admin/datasets/toy/grants"),
    ("GET", "/v1/admin/datasets/toy/grants"),
    ("GET", "/v1/admin/ledger"),
    ("GET", "/v1/admin/ledger/verify"),
    ("GET", "/v1/admin/audit"),
]


def count(client: TestClient, dataset_id: str, headers: dict[str, str], epsilon: float) -> None:
    """Spend ``epsilon`` on a noisy count of all rows."""
    response = client.post(
        f"/v1/datasets/{dataset_id}/counts", json={"epsilon": epsilon}, headers=headers
    )
    assert response.status_code == 200, response.text


def upload(
    client: TestClient,
    headers: dict[str, str],
    request: dict[str, Any] | str,
    files: dict[str, Path],
) -> httpx.Response:
    """POST the upload form: ``request`` as JSON text plus the file fields."""
    text = request if isinstance(request, str) else json.dumps(request)
    handles = {field: (path.name, path.read_bytes()) for field, path in files.items()}
    response: httpx.Response = client.post(
        "/v1/admin/datasets/upload",
        data={"request": text},
        files=handles or None,
        headers=headers,
    )
    return response


def toy_request(metadata: DatasetMetadata, dataset_id: str = "fresh") -> dict[str, Any]:
    """A CreateDatasetRequest body for the toy CSV."""
    return CreateDatasetRequest(
        id=dataset_id,
        name="Fresh",
        epsilon_cap=3.0,
        metadata=metadata,
        source=CsvSource(path="toy.csv"),
    ).model_dump(mode="json")


# -- principals -----------------------------------------------------------------------------------


class TestPrincipals:
    def test_create_and_list(self, client: TestClient, owner_headers: dict[str, str]) -> None:
        response = client.post(
            "/v1/admin/principals", json={"name": "carol", "role": "analyst"}, headers=owner_headers
        )
        assert response.status_code == 201
        created = PrincipalCreated.model_validate(response.json())
        assert created.api_key.startswith("dpm_")
        assert len(created.api_key) >= 40
        assert created.principal.key_prefix == created.api_key[:10]
        assert (created.principal.name, created.principal.role) == ("carol", "analyst")
        assert client.get("/v1/datasets", headers=bearer(created.api_key)).status_code == 200
        listed = client.get("/v1/admin/principals", headers=owner_headers)
        assert listed.status_code == 200
        principals = [PrincipalInfo.model_validate(p) for p in listed.json()]
        assert [(p.name, p.role, p.disabled) for p in principals] == [
            ("admin", "owner", False),
            ("carol", "analyst", False),
        ]
        assert created.api_key not in listed.text
        assert "hash" not in listed.text

    def test_duplicate_name_is_409(
        self, owner: dpmine.Connection, client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        owner.admin.add_principal("dave", "analyst")
        response = client.post(
            "/v1/admin/principals", json={"name": "dave", "role": "owner"}, headers=owner_headers
        )
        assert "'dave'" in expect_error(response, 409, "Conflict")

    @pytest.mark.parametrize(
        "body",
        [{"name": "bad name!", "role": "analyst"}, {"name": "erin", "role": "root"}, {"name": ""}],
    )
    def test_invalid_principal_is_422(
        self, client: TestClient, owner_headers: dict[str, str], body: dict[str, str]
    ) -> None:
        response = client.post("/v1/admin/principals", json=body, headers=owner_headers)
        expect_error(response, 422, "InvalidRequest")

    def test_rotated_key_replaces_the_old_one(
        self, client: TestClient, owner_headers: dict[str, str], analyst_key: str
    ) -> None:
        response = client.post("/v1/admin/principals/alice/rotate-key", headers=owner_headers)
        assert response.status_code == 200
        rotated = PrincipalCreated.model_validate(response.json())
        assert rotated.api_key != analyst_key
        assert rotated.principal.key_prefix == rotated.api_key[:10]
        assert client.get("/v1/datasets", headers=bearer(rotated.api_key)).status_code == 200
        old = client.get("/v1/datasets", headers=bearer(analyst_key))
        expect_error(old, 401, "Unauthorized")

    def test_disabled_principal_is_locked_out(
        self, client: TestClient, owner_headers: dict[str, str], analyst_key: str
    ) -> None:
        response = client.post("/v1/admin/principals/alice/disable", headers=owner_headers)
        assert response.status_code == 200
        assert PrincipalInfo.model_validate(response.json()).disabled is True
        expect_error(client.get("/v1/datasets", headers=bearer(analyst_key)), 401, "Unauthorized")

    @pytest.mark.parametrize("action", ["rotate-key", "disable"])
    def test_unknown_principal_is_404(
        self, client: TestClient, owner_headers: dict[str, str], action: str
    ) -> None:
        response = client.post(f"/v1/admin/principals/nobody/{action}", headers=owner_headers)
        assert "'nobody'" in expect_error(response, 404, "NotFound")

    @pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
    def test_analysts_are_forbidden(
        self, client: TestClient, analyst_headers: dict[str, str], method: str, path: str
    ) -> None:
        response = client.request(method, path, headers=analyst_headers)
        expect_error(response, 403, "Forbidden")

    @pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
    def test_owner_routes_need_a_key(self, client: TestClient, method: str, path: str) -> None:
        response = client.request(method, path)
        expect_error(response, 401, "Unauthorized")


# -- datasets -------------------------------------------------------------------------------------


class TestUpload:
    def test_upload_registers_and_reports_to_the_owner(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
        toy_rows: list[dict[str, str]],
    ) -> None:
        response = upload(client, owner_headers, toy_request(toy_metadata), {"path": toy_csv})
        assert response.status_code == 201, response.text
        body = response.json()
        info = DatasetInfo.model_validate(body["dataset"])
        assert (info.id, info.version, info.status) == ("fresh", 1, "active")
        report = body["report"]
        assert report["n_rows"] == len(toy_rows)  # the owner may see n; analysts never do
        assert report["missing"]["age"] == sum(r["age"] == "NA" for r in toy_rows)
        assert report["clipped"]["age"] == sum(
            r["age"] != "NA" and int(r["age"]) > 90 for r in toy_rows
        )
        assert report["ignored_columns"] == []

    def test_a_form_cut_short_registers_nothing(
        self,
        *,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
        api_settings: Settings,
    ) -> None:
        """A body that ends inside the file part, at a line end (no closing boundary), is
        refused: the rows read so far are never taken for the table, and no file is left."""
        data = toy_csv.read_bytes()
        cut = data.rindex(b"\n", 0, len(data) // 2) + 1
        boundary = "dpmine-cut-short"
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="request"\r\n\r\n'
            f"{json.dumps(toy_request(toy_metadata))}\r\n--{boundary}\r\n"
            f'Content-Disposition: form-data; name="path"; filename="{toy_csv.name}"\r\n\r\n'
        )
        response = client.post(
            "/v1/admin/datasets/upload",
            content=head.encode() + data[:cut],
            headers={**owner_headers, "content-type": f"multipart/form-data; boundary={boundary}"},
        )
        assert "closing boundary" in expect_error(response, 422, "InvalidRequest")
        assert client.get("/v1/datasets/fresh", headers=owner_headers).status_code == 404
        assert list((api_settings.data_dir / "uploads").iterdir()) == []

    @pytest.mark.parametrize(
        ("fields", "files", "message"),
        [
            ({"request": "{}", "comment": "x"}, {"path": b"a\n"}, "unknown form field 'comment'"),
            ({"request": ["{}", "{}"]}, {"path": b"a\n"}, "'request' is sent twice"),
            ({"request": "{}", "path": "toy.csv"}, {"left": b"a\n"}, "must be a file upload"),
            ({"request": "{}", "path": "toy.csv"}, {}, "must be a file upload"),
            ({}, {"request": b"{}", "path": b"a\n"}, "'request' must be text"),
            ({}, {"path": b"a\n"}, "'request' is missing"),
        ],
        ids=["unknown", "twice", "text for a file", "urlencoded", "file for text", "missing"],
    )
    def test_the_form_names_what_to_fix(
        self,
        *,
        client: TestClient,
        owner_headers: dict[str, str],
        api_settings: Settings,
        fields: dict[str, Any],
        files: dict[str, bytes],
        message: str,
    ) -> None:
        """Every form fault is a 422 naming the field, before any data is read; no file stays."""
        response = client.post(
            "/v1/admin/datasets/upload",
            data=fields,
            files={name: (f"{name}.csv", content) for name, content in files.items()} or None,
            headers=owner_headers,
        )
        assert message in expect_error(response, 422, "InvalidRequest")
        assert list((api_settings.data_dir / "uploads").iterdir()) == []

    def test_files_written_in_blocks_are_the_files_sent(
        self,
        *,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
        toy_rows: list[dict[str, str]],
        api_settings: Settings,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """With 7-byte write blocks, a file arrives in many writes: the dataset keeps exactly
        the bytes sent, under the name sent, and the upload folder is left empty."""
        monkeypatch.setattr(uploads, "WRITE_BLOCK_BYTES", 7)
        response = upload(client, owner_headers, toy_request(toy_metadata), {"path": toy_csv})
        assert response.status_code == 201, response.text
        assert response.json()["report"]["n_rows"] == len(toy_rows)
        kept = [
            path
            for path in api_settings.data_dir.rglob(f"path-{toy_csv.name}")
            if "uploads" not in path.parts
        ]
        assert [path.read_bytes() for path in kept] == [toy_csv.read_bytes()]
        assert list((api_settings.data_dir / "uploads").iterdir()) == []

    def test_undeclared_category_names_the_column(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
        api_settings: Settings,
    ) -> None:
        attributes = [
            CategoricalAttribute(name="color", view="right", categories=["red", "green"])
            if a.name == "color"
            else a
            for a in toy_metadata.attributes
        ]
        metadata = toy_metadata.model_copy(update={"attributes": attributes})
        response = upload(client, owner_headers, toy_request(metadata), {"path": toy_csv})
        detail = expect_error(response, 422, "InvalidRequest")
        assert "column 'color'" in detail
        assert "'blue'" in detail
        assert client.get("/v1/datasets/fresh", headers=owner_headers).status_code == 404
        assert not (api_settings.data_dir / "datasets" / "fresh" / "v1").exists()

    @pytest.mark.parametrize(
        ("attribute", "fragment"),
        [
            (NumericAttribute(name="weight", view="left", lo=0, hi=1), "no column 'weight'"),
            (NumericAttribute(name="color", view="right", lo=0, hi=1), "column 'color'"),
            (BooleanAttribute(name="age", view="left"), "column 'age'"),
        ],
    )
    def test_metadata_that_does_not_fit_the_file(
        self,
        *,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
        attribute: Any,
        fragment: str,
    ) -> None:
        kept = [a for a in toy_metadata.attributes if a.name != attribute.name]
        metadata = toy_metadata.model_copy(update={"attributes": [*kept, attribute]})
        response = upload(client, owner_headers, toy_request(metadata), {"path": toy_csv})
        assert fragment in expect_error(response, 422, "InvalidRequest")

    def test_n_max_below_the_row_count_is_refused(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
    ) -> None:
        metadata = toy_metadata.model_copy(update={"n_max": 100})
        response = upload(client, owner_headers, toy_request(metadata), {"path": toy_csv})
        assert "n_max" in expect_error(response, 422, "InvalidRequest")

    @pytest.mark.parametrize(
        ("request_text", "fragment"),
        [
            ("not json", "form field 'request'"),
            ('{"id": "x"}', "form field 'request'"),
        ],
    )
    def test_malformed_request_field(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        request_text: str,
        fragment: str,
    ) -> None:
        response = upload(client, owner_headers, request_text, {"path": toy_csv})
        assert fragment in expect_error(response, 422, "InvalidRequest")

    def test_file_must_be_uploaded(
        self, client: TestClient, owner_headers: dict[str, str], toy_metadata: DatasetMetadata
    ) -> None:
        for path in ("toy.csv", "../../../etc/passwd", "/etc/passwd"):
            request = toy_request(toy_metadata)
            request["source"]["path"] = path
            response = upload(client, owner_headers, request, {})
            assert "upload the file" in expect_error(response, 422, "InvalidRequest")

    def test_taken_id_is_409(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy: str,
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
    ) -> None:
        response = upload(client, owner_headers, toy_request(toy_metadata, toy), {"path": toy_csv})
        assert f"{toy!r}" in expect_error(response, 409, "Conflict")

    @pytest.mark.parametrize("dataset_id", ["Toy", "-toy", "to y", "t" * 65, "tôy", ""])
    def test_a_bad_id_is_refused_with_the_rule_in_words(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
        dataset_id: str,
    ) -> None:
        request = toy_request(toy_metadata)
        request["id"] = dataset_id
        detail = expect_error(
            upload(client, owner_headers, request, {"path": toy_csv}), 422, "InvalidRequest"
        )
        assert DATASET_ID_RULE in detail, detail
        assert "[a-z0-9]" not in detail
        assert "pattern" not in detail

    def test_an_id_that_breaks_the_rule_is_named_in_the_not_found_answer(
        self, client: TestClient, owner_headers: dict[str, str], analyst_headers: dict[str, str]
    ) -> None:
        for headers, method, path in [
            (analyst_headers, "GET", "/v1/datasets/Mushroom"),
            (owner_headers, "DELETE", "/v1/admin/datasets/Mushroom"),
        ]:
            detail = expect_error(client.request(method, path, headers=headers), 404, "NotFound")
            assert "'Mushroom'" in detail
            assert DATASET_ID_RULE in detail, detail
        # A well-formed unknown id gets the plain answer.
        detail = expect_error(
            client.get("/v1/datasets/mushroom", headers=analyst_headers), 404, "NotFound"
        )
        assert DATASET_ID_RULE not in detail

    def test_sql_source(
        self, owner: dpmine.Connection, tmp_path: Path, analyst_key: str, client: TestClient
    ) -> None:
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'hospital.sqlite3'}")
        with engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE patients (sick INTEGER, ward TEXT)")
            connection.exec_driver_sql(
                "INSERT INTO patients VALUES (1, 'a'), (0, 'b'), (1, 'b'), (NULL, 'a')"
            )
        engine.dispose()
        request = CreateDatasetRequest(
            id="hospital",
            name="Hospital",
            epsilon_cap=1.0,
            metadata=DatasetMetadata(
                kind="table",
                n_max=10,
                attributes=[
                    BooleanAttribute(name="sick"),
                    CategoricalAttribute(name="ward", categories=["a", "b"]),
                ],
            ),
            source=SqlSource(url=f"sqlite:///{tmp_path / 'hospital.sqlite3'}", table="patients"),
        )
        registered = owner.admin.register_dataset(request)
        assert registered["report"]["n_rows"] == 4
        assert registered["report"]["missing"]["sick"] == 1
        owner.admin.grant("hospital", "alice", 1.0)
        count(client, "hospital", bearer(analyst_key), 0.5)

    def test_upload_above_the_size_limit_is_refused(
        self,
        api_settings: Settings,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
    ) -> None:
        limit = toy_csv.stat().st_size // 2
        settings = api_settings.model_copy(update={"max_upload_bytes": limit})
        with TestClient(create_app(settings), raise_server_exceptions=False) as limited:
            response = upload(limited, owner_headers, toy_request(toy_metadata), {"path": toy_csv})
            assert response.status_code in {413, 422}, response.text
            assert set(response.json()) == {"error", "detail"}
            assert limited.get("/v1/datasets/fresh", headers=owner_headers).status_code == 404

    @pytest.mark.parametrize("url", ["not a url", "nosuchdriver://user:s3cret@host/db"])
    def test_bad_sql_url_is_422_without_echoing_it(
        self, client: TestClient, owner_headers: dict[str, str], url: str
    ) -> None:
        request = CreateDatasetRequest(
            id="remote",
            name="Remote",
            epsilon_cap=1.0,
            metadata=DatasetMetadata(
                kind="table", n_max=10, attributes=[BooleanAttribute(name="a")]
            ),
            source=SqlSource(url=url, table="t"),
        )
        response = client.post(
            "/v1/admin/datasets", json=request.model_dump(mode="json"), headers=owner_headers
        )
        detail = expect_error(response, 422, "InvalidRequest")
        assert "s3cret" not in detail
        assert url not in detail


class TestProposeMetadata:
    def _propose(
        self, client: TestClient, headers: dict[str, str], toy_csv: Path, **fields: str
    ) -> httpx.Response:
        data = {"source": json.dumps({"format": "csv", "path": "toy.csv"}), **fields}
        response: httpx.Response = client.post(
            "/v1/admin/datasets/propose-metadata",
            data=data,
            files={"path": ("toy.csv", toy_csv.read_bytes())},
            headers=headers,
        )
        return response

    def test_proposal_types_the_columns(
        self, client: TestClient, owner_headers: dict[str, str], toy_csv: Path
    ) -> None:
        response = self._propose(client, owner_headers, toy_csv, kind="table")
        assert response.status_code == 200, response.text
        metadata = DatasetMetadata.model_validate(response.json())
        by_name = {a.name: a for a in metadata.attributes}
        age = by_name["age"]
        assert isinstance(age, NumericAttribute)
        assert age.lo <= 18
        assert age.hi >= 99
        assert by_name["smoker"].type == "boolean"
        assert by_name["member"].type == "boolean"
        color = by_name["color"]
        assert isinstance(color, CategoricalAttribute)
        assert color.categories == ["blue", "green", "red"]
        assert metadata.n_max >= 240

    def test_proposal_with_views(
        self, client: TestClient, owner_headers: dict[str, str], toy_csv: Path
    ) -> None:
        views = {"age": "left", "smoker": "left", "color": "right", "member": "right"}
        response = self._propose(
            client, owner_headers, toy_csv, kind="views", views=json.dumps(views)
        )
        assert response.status_code == 200, response.text
        metadata = DatasetMetadata.model_validate(response.json())
        assert {a.name: a.view for a in metadata.attributes} == views

    def test_proposal_with_a_label(
        self, client: TestClient, owner_headers: dict[str, str], toy_csv: Path
    ) -> None:
        response = self._propose(client, owner_headers, toy_csv, kind="table", label="color=red")
        assert response.status_code == 200, response.text
        metadata = DatasetMetadata.model_validate(response.json())
        assert metadata.label is not None
        assert (metadata.label.attribute, metadata.label.positive) == ("color", "red")

    @pytest.mark.parametrize(
        ("fields", "fragment"),
        [
            ({"kind": "views", "views": json.dumps({"weight": "left"})}, "'weight'"),
            ({"kind": "views"}, "view"),
            ({"kind": "views", "views": json.dumps({"age": "up"})}, "views"),
            ({"kind": "transactions"}, "FIMI"),
        ],
    )
    def test_impossible_proposals_are_422(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        fields: dict[str, str],
        fragment: str,
    ) -> None:
        response = self._propose(client, owner_headers, toy_csv, **fields)
        assert fragment in expect_error(response, 422, "InvalidRequest")

    def test_an_unreviewed_proposal_is_refused_unless_reviewed_or_forced(
        self, client: TestClient, owner_headers: dict[str, str], toy_csv: Path
    ) -> None:
        response = self._propose(client, owner_headers, toy_csv, kind="table")
        proposal = DatasetMetadata.model_validate(response.json())
        assert proposal.review is not None
        assert not proposal.review.reviewed
        assert any("column 'age': range" in note for note in proposal.review.notes)
        refused = upload(client, owner_headers, toy_request(proposal, "prop"), {"path": toy_csv})
        detail = expect_error(refused, 422, "InvalidRequest")
        assert "has not been reviewed" in detail
        assert "column 'age': range" in detail  # the proposal's reasons come back
        forced = client.post(
            "/v1/admin/datasets/upload",
            params={"force": "true"},
            data={"request": json.dumps(toy_request(proposal, "prop"))},
            files={"path": ("toy.csv", toy_csv.read_bytes())},
            headers=owner_headers,
        )
        assert forced.status_code == 201, forced.text
        reviewed = proposal.model_copy(
            update={"review": proposal.review.model_copy(update={"reviewed": True})}
        )
        accepted = upload(client, owner_headers, toy_request(reviewed, "prop2"), {"path": toy_csv})
        assert accepted.status_code == 201, accepted.text
        assert accepted.json()["warnings"] == []
        for dataset_id in ("prop", "prop2"):  # the owner-only review is never kept
            shown = client.get(f"/v1/datasets/{dataset_id}", headers=owner_headers).json()
            assert shown["metadata"]["review"] is None

    def test_a_range_copied_from_the_data_is_warned(
        self,
        client: TestClient,
        owner_headers: dict[str, str],
        toy_csv: Path,
        toy_metadata: DatasetMetadata,
        toy_rows: list[dict[str, str]],
    ) -> None:
        ages = [int(r["age"]) for r in toy_rows if r["age"] != "NA"]
        assert max(ages) % 5  # a maximum that is not a round number
        attributes = [
            a.model_copy(update={"lo": 0, "hi": max(ages)}) if a.name == "age" else a
            for a in toy_metadata.attributes
        ]
        metadata = toy_metadata.model_copy(update={"attributes": attributes})
        response = upload(client, owner_headers, toy_request(metadata, "copied"), {"path": toy_csv})
        assert response.status_code == 201, response.text
        [warning] = response.json()["warnings"]
        assert "attribute 'age': hi equals the data's maximum exactly" in warning

    def test_bad_source_field(self, client: TestClient, owner_headers: dict[str, str]) -> None:
        response = client.post(
            "/v1/admin/datasets/propose-metadata",
            data={"source": "{", "kind": "table"},
            headers=owner_headers,
        )
        assert "form field 'source'" in expect_error(response, 422, "InvalidRequest")


class TestRetire:
    def test_retired_dataset_disappears_for_analysts(
        self,
        *,
        client: TestClient,
        toy: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        count(client, toy, analyst_headers, 0.5)
        response = client.delete(f"/v1/admin/datasets/{toy}", headers=owner_headers)
        assert response.status_code == 200
        assert DatasetInfo.model_validate(response.json()).status == "retired"
        assert client.get("/v1/datasets", headers=analyst_headers).json() == []
        for method, path, body in (
            ("GET", f"/v1/datasets/{toy}", None),
            ("GET", f"/v1/datasets/{toy}/budget", None),
            ("POST", f"/v1/datasets/{toy}/counts", {"epsilon": 0.1}),
            (
                "POST",
                f"/v1/datasets/{toy}/estimate",
                {"calls": [{"operation": "count.noisy", "request": {"epsilon": 0.1}}]},
            ),
            (
                "POST",
                f"/v1/datasets/{toy}/jobs",
                {"operation": "count.noisy", "request": {"epsilon": 0.1}},
            ),
        ):
            answer = client.request(method, path, json=body, headers=analyst_headers)
            expect_error(answer, 404, "NotFound")
        seen = client.get(f"/v1/datasets/{toy}", headers=owner_headers)
        assert seen.json()["status"] == "retired"
        with services.sessions() as session:  # the ledger is kept
            kept = session.scalars(select(LedgerEntry.dataset_id)).all()
        assert kept == [toy]

    def test_retire_unknown_dataset_is_404(
        self, client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        expect_error(
            client.delete("/v1/admin/datasets/nope", headers=owner_headers), 404, "NotFound"
        )


class TestCap:
    def test_cap_lifecycle(
        self,
        client: TestClient,
        toy: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
    ) -> None:
        """A cap can be read, lowered to what was spent (no further), raised again, and every
        change is audited with its old and new amounts."""
        url = f"/v1/admin/datasets/{toy}/cap"
        start = DatasetCap.model_validate(client.get(url, headers=owner_headers).json())
        assert (start.epsilon_cap, start.spent, start.status) == (10.0, 0.0, "active")
        count(client, toy, analyst_headers, 0.5)
        below = client.put(url, json={"epsilon_cap": 0.4}, headers=owner_headers)
        assert "already spent 0.5" in expect_error(below, 422, "InvalidRequest")
        exact = client.put(url, json={"epsilon_cap": 0.5}, headers=owner_headers)
        assert DatasetCap.model_validate(exact.json()).remaining == 0.0
        refused = client.post(
            f"/v1/datasets/{toy}/counts", json={"epsilon": 0.01}, headers=analyst_headers
        )
        expect_error(refused, 409, "BudgetExhausted")
        raised = client.put(url, json={"epsilon_cap": 2.0}, headers=owner_headers)
        assert DatasetCap.model_validate(raised.json()).remaining == 1.5
        count(client, toy, analyst_headers, 0.25)
        events = client.get("/v1/admin/audit", headers=owner_headers).json()
        changes = [e["details"] for e in events if e["action"] == "dataset_cap_set"]
        expected = [{"from": "10", "to": "0.5"}, {"from": "0.5", "to": "2"}]
        assert sorted(changes, key=str) == sorted(expected, key=str)

    def test_a_bad_cap_or_a_retired_dataset_is_refused_and_changes_nothing(
        self, client: TestClient, toy: str, owner_headers: dict[str, str]
    ) -> None:
        url = f"/v1/admin/datasets/{toy}/cap"
        for body in ({"epsilon_cap": 0}, {"epsilon_cap": "x"}, {}):
            expect_error(client.put(url, json=body, headers=owner_headers), 422, "InvalidRequest")
        client.delete(f"/v1/admin/datasets/{toy}", headers=owner_headers)
        retired = client.put(url, json={"epsilon_cap": 20.0}, headers=owner_headers)
        assert "retired" in expect_error(retired, 422, "InvalidRequest")
        assert client.get(url, headers=owner_headers).json()["epsilon_cap"] == 10.0
        missing = client.put(
            "/v1/admin/datasets/nope/cap", json={"epsilon_cap": 1.0}, headers=owner_headers
        )
        expect_error(missing, 404, "NotFound")


class TestGrants:
    def test_grant_lifecycle(
        self,
        client: TestClient,
        toy: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
    ) -> None:
        url = f"/v1/admin/datasets/{toy}/grants"
        response = client.put(url, json={"analyst": "alice", "epsilon": 1.0}, headers=owner_headers)
        assert response.status_code == 200
        assert GrantInfo.model_validate(response.json()) == GrantInfo(
            analyst="alice", dataset_id=toy, epsilon=1.0, spent=0.0, remaining=1.0
        )
        count(client, toy, analyst_headers, 0.3)
        below = client.put(url, json={"analyst": "alice", "epsilon": 0.2}, headers=owner_headers)
        detail = expect_error(below, 422, "InvalidRequest")
        assert "already spent 0.3" in detail
        exact = client.put(url, json={"analyst": "alice", "epsilon": 0.3}, headers=owner_headers)
        assert exact.status_code == 200
        assert exact.json()["remaining"] == 0.0
        refused = client.post(
            f"/v1/datasets/{toy}/counts", json={"epsilon": 0.01}, headers=analyst_headers
        )
        expect_error(refused, 409, "BudgetExhausted")
        listed = client.get(url, headers=owner_headers)
        assert listed.status_code == 200, listed.text
        assert [GrantInfo.model_validate(g).spent for g in listed.json()] == [0.3]

    @pytest.mark.parametrize(
        ("dataset_id", "body", "status", "error"),
        [
            ("toy", {"analyst": "admin", "epsilon": 1.0}, 422, "InvalidRequest"),
            ("toy", {"analyst": "nobody", "epsilon": 1.0}, 404, "NotFound"),
            ("nope", {"analyst": "alice", "epsilon": 1.0}, 404, "NotFound"),
            ("toy", {"analyst": "alice", "epsilon": 0}, 422, "InvalidRequest"),
            ("toy", {"analyst": "alice", "epsilon": 2_000_000}, 422, "InvalidRequest"),
        ],
    )
    def test_refused_grants(
        self,
        *,
        client: TestClient,
        toy: str,
        owner_headers: dict[str, str],
        dataset_id: str,
        body: dict[str, Any],
        status: int,
        error: str,
    ) -> None:
        del toy  # registered so that only the parameter under test is wrong
        response = client.put(
            f"/v1/admin/datasets/{dataset_id}/grants", json=body, headers=owner_headers
        )
        expect_error(response, status, error)

    def test_revoking_keeps_what_was_spent(
        self,
        client: TestClient,
        toy: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
    ) -> None:
        url = f"/v1/admin/datasets/{toy}/grants"
        client.put(url, json={"analyst": "alice", "epsilon": 1.0}, headers=owner_headers)
        count(client, toy, analyst_headers, 0.25)
        revoked = client.delete(f"{url}/alice", headers=owner_headers)
        assert revoked.status_code == 200, revoked.text
        assert GrantInfo.model_validate(revoked.json()) == GrantInfo(
            analyst="alice", dataset_id=toy, epsilon=0.25, spent=0.25, remaining=0.0
        )
        refused = client.post(
            f"/v1/datasets/{toy}/counts", json={"epsilon": 0.01}, headers=analyst_headers
        )
        expect_error(refused, 409, "BudgetExhausted")
        events = client.get("/v1/admin/audit", headers=owner_headers).json()
        assert any(e["action"] == "grant_revoked" for e in events)
        assert client.get("/v1/admin/ledger/verify", headers=owner_headers).json()["consistent"]

    def test_revoking_an_unused_grant_deletes_it(
        self,
        client: TestClient,
        toy: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
    ) -> None:
        url = f"/v1/admin/datasets/{toy}/grants"
        client.put(url, json={"analyst": "alice", "epsilon": 1.0}, headers=owner_headers)
        assert client.delete(f"{url}/alice", headers=owner_headers).status_code == 200
        assert client.get(url, headers=owner_headers).json() == []
        expect_error(client.delete(f"{url}/alice", headers=owner_headers), 404, "NotFound")
        expect_error(client.delete(f"{url}/alice", headers=analyst_headers), 403, "Forbidden")

    def test_grants_of_unknown_dataset_is_404(
        self, client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        response = client.get("/v1/admin/datasets/nope/grants", headers=owner_headers)
        expect_error(response, 404, "NotFound")


# -- ledger and audit -----------------------------------------------------------------------------


class TestLedgerExports:
    def test_json_and_csv_exports(
        self,
        *,
        client: TestClient,
        toy: str,
        mushroom: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
    ) -> None:
        count(client, toy, analyst_headers, 0.1)
        count(client, mushroom, analyst_headers, 0.2)
        count(client, toy, analyst_headers, 0.3)
        response = client.get("/v1/admin/ledger", headers=owner_headers)
        assert response.status_code == 200, response.text
        ledger = [LedgerEntryInfo.model_validate(e) for e in response.json()]
        assert [(e.dataset_id, e.epsilon_exact, e.status) for e in ledger] == [
            (toy, "0.1", "released"),
            (mushroom, "0.2", "released"),
            (toy, "0.3", "released"),
        ]
        assert {e.principal for e in ledger} == {"alice"}
        assert all(e.release is not None for e in ledger)
        only_toy = client.get(
            "/v1/admin/ledger", params={"dataset_id": toy}, headers=owner_headers
        ).json()
        assert [e["epsilon_exact"] for e in only_toy] == ["0.1", "0.3"]

        exported = client.get("/v1/admin/ledger", params={"format": "csv"}, headers=owner_headers)
        assert exported.status_code == 200
        assert exported.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        assert [r["epsilon_exact"] for r in rows] == ["0.1", "0.2", "0.3"]
        assert list(rows[0]) == [
            "id",
            "dataset_id",
            "principal",
            "operation",
            "epsilon_exact",
            "guarantee",
            "status",
            "idempotency_key",
            "created_at",
            "completed_at",
            "parameters",
            "release",
        ]
        assert json.loads(rows[0]["parameters"]) == {"predicate": None, "epsilon": 0.1}
        assert json.loads(rows[2]["release"]) == ledger[2].release

    def test_verify_reports_consistency(
        self,
        client: TestClient,
        toy: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
    ) -> None:
        count(client, toy, analyst_headers, 0.1)
        response = client.get("/v1/admin/ledger/verify", headers=owner_headers)
        assert response.status_code == 200
        assert response.json() == {"consistent": True, "problems": []}

    def test_bad_export_format_is_422(
        self, client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        response = client.get("/v1/admin/ledger", params={"format": "xml"}, headers=owner_headers)
        expect_error(response, 422, "InvalidRequest")


class TestAudit:
    def test_owner_actions_are_recorded(
        self,
        *,
        client: TestClient,
        owner: dpmine.Connection,
        toy: str,
        owner_headers: dict[str, str],
    ) -> None:
        owner.admin.rotate_key("alice")
        owner.admin.disable("alice")
        owner.admin.retire_dataset(toy)
        response = client.get("/v1/admin/audit", headers=owner_headers)
        assert response.status_code == 200, response.text
        events = [AuditEventInfo.model_validate(e) for e in response.json()]
        assert [(e.action, e.target) for e in events] == [
            ("dataset_retired", toy),
            ("principal_disabled", "alice"),
            ("key_rotated", "alice"),
            ("grant_set", f"{toy}/alice"),
            ("dataset_registered", toy),
            ("principal_created", "alice"),
            ("bootstrap_owner", "admin"),
        ]
        assert {e.principal for e in events[:-1]} == {"admin"}
        assert events[3].details == {"epsilon": 5.0}

    def test_authentication_failures_are_recorded_without_the_key(
        self, client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        wrong = "dpm_wrongkey-with-a-secret-tail"
        client.get("/v1/datasets", headers=bearer(wrong))
        response = client.get("/v1/admin/audit", headers=owner_headers)
        assert response.status_code == 200, response.text
        failures = [e for e in response.json() if e["action"] == "auth_failed"]
        assert len(failures) == 1
        assert failures[0]["principal"] is None
        assert failures[0]["details"] == {"key_prefix": wrong[:10]}
        assert "secret-tail" not in response.text


def test_every_timestamp_carries_its_time_zone(
    client: TestClient, toy: str, owner_headers: dict[str, str], analyst_headers: dict[str, str]
) -> None:
    job = client.post(
        f"/v1/datasets/{toy}/jobs",
        json={"operation": "count.noisy", "request": {"epsilon": 0.1}},
        headers=analyst_headers,
    ).json()
    stamps = [
        job["created_at"],
        job["updated_at"],
        client.get(f"/v1/datasets/{toy}", headers=analyst_headers).json()["created_at"],
        client.get("/v1/admin/ledger", headers=owner_headers).json()[0]["created_at"],
        client.get("/v1/admin/audit", headers=owner_headers).json()[0]["at"],
        client.get("/v1/admin/principals", headers=owner_headers).json()[0]["created_at"],
    ]
    for stamp in stamps:
        assert stamp.endswith(("Z", "+00:00")), stamp


# -- start-up -------------------------------------------------------------------------------------


class TestStartUp:
    def test_empty_database_is_migrated_and_bootstrapped_once(
        self, tmp_path: Path, api_settings: Settings
    ) -> None:
        settings = api_settings.model_copy(
            update={"database_url": f"sqlite:///{tmp_path / 'empty.sqlite3'}"}
        )
        for _ in range(2):  # a restart neither fails nor adds a second owner
            with TestClient(create_app(settings), raise_server_exceptions=False) as fresh:
                health = fresh.get("/v1/health")
                assert health.status_code == 200
                assert health.json()["full_collections"] == "automatic"  # test mode: unpadded
                listed = fresh.get("/v1/admin/principals", headers=bearer(settings_key(settings)))
                assert [p["name"] for p in listed.json()] == ["admin"]
                events = fresh.get("/v1/admin/audit", headers=bearer(settings_key(settings)))
                assert [e["action"] for e in events.json()] == ["bootstrap_owner"]

    def test_restart_interrupts_what_a_crash_left_reserved(
        self,
        *,
        app: FastAPI,
        api_settings: Settings,
        toy: str,
        services: Services,
        client: TestClient,
    ) -> None:
        crashed = reserve_half(services, toy, "crashed")  # charged, then its process died
        # The entry is made to belong to a process that no longer exists (both apps of this
        # test share one process, which is alive); recovery runs in the second one's start-up.
        with services.write_sessions() as session, session.begin():
            session.execute(
                update(LedgerEntry)
                .where(LedgerEntry.id == crashed.entry_id)
                .values(instance_id=f"p{dead_pid()}-1")
            )
        del app, client
        with TestClient(create_app(api_settings), raise_server_exceptions=False) as restarted:
            owner = bearer(settings_key(api_settings))
            [entry] = restarted.get("/v1/admin/ledger", headers=owner).json()
            assert (entry["status"], entry["epsilon_exact"]) == ("interrupted", "0.5")
            events = restarted.get("/v1/admin/audit", headers=owner).json()
            assert events[0]["action"] == "recovery"
            assert events[0]["details"] == {"interrupted_entries": 1, "failed_jobs": 0}
            assert restarted.get("/v1/admin/ledger/verify", headers=owner).json()["consistent"]

    def test_a_second_worker_does_not_interrupt_live_requests(
        self, *, api_settings: Settings, toy: str, services: Services
    ) -> None:
        # Several workers may share one database (DESIGN.md: "any worker can serve the next
        # call"); one of them starting must not break a request another one is computing.
        in_flight = reserve_half(services, toy, "in-flight")
        with TestClient(create_app(api_settings), raise_server_exceptions=False) as second:
            assert second.get("/v1/health").status_code == 200
            services.ledger.complete(in_flight.entry_id, {"count": 1, "receipt": {}})


def dead_pid() -> int:
    """A process id that no process has now."""
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid += 1
    return pid


def reserve_half(services: Services, dataset_id: str, idempotency_key: str) -> Reservation:
    """Charge alice ε = 0.5 for a noisy count of all rows, straight in the ledger (nothing
    released yet)."""
    with services.sessions() as session:
        alice = get_principal(session, "alice")
    parameters = {"predicate": None, "epsilon": 0.5}
    return services.ledger.reserve(
        principal=alice,
        dataset_id=dataset_id,
        operation="count.noisy",
        parameters=parameters,
        cost=Epsilon.charge(0.5),
        guarantee="pure",
        idempotency_key=idempotency_key,
        request_hash=request_fingerprint("count.noisy", dataset_id, parameters),
    )


def settings_key(settings: Settings) -> str:
    """The bootstrap owner's key of ``settings``."""
    assert settings.bootstrap_owner_key is not None
    return settings.bootstrap_owner_key


# -- OpenAPI --------------------------------------------------------------------------------------


class TestOpenAPI:
    def test_every_documented_route_exists_and_needs_a_key(self, client: TestClient) -> None:
        paths: dict[str, dict[str, Any]] = client.get("/openapi.json").json()["paths"]
        documented = {(method.upper(), path) for path, item in paths.items() for method in item}
        assert set(SPECIFIED_ROUTES) <= documented
        for method, path in documented:
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            response = client.request(method, concrete)
            expected = 200 if path == "/v1/health" else 401  # not 404/405: the route is real
            assert response.status_code == expected, (method, path, response.text)

    def test_every_route_has_request_and_response_schemas(self, client: TestClient) -> None:
        paths: dict[str, dict[str, Any]] = client.get("/openapi.json").json()["paths"]
        for path, item in paths.items():
            for method, operation in item.items():
                where = f"{method.upper()} {path}"
                success = [code for code in operation["responses"] if code.startswith("2")]
                assert len(success) == 1, where
                if success[0] != "204":  # 204 No Content has no body to describe
                    content = operation["responses"][success[0]]["content"]
                    assert "schema" in content["application/json"], where
                if path != "/v1/health":
                    for code in ("401", "403", "404", "409", "422"):
                        schema = operation["responses"][code]["content"]["application/json"]
                        assert schema["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
                # Actions on a named principal, dataset or job (rotate-key, disable, refresh,
                # cancel) take no body.
                action = "{name}" in path or path.endswith(("/refresh", "/cancel"))
                if method in {"post", "put"} and not action:
                    body = operation["requestBody"]["content"]
                    assert any("schema" in media for media in body.values()), where

    def test_operation_bodies_reference_the_wire_models(self, client: TestClient) -> None:
        document = client.get("/openapi.json").json()
        schemas = document["components"]["schemas"]
        for name in ("NoisyCountRequest", "ComputeQualityRequest", "ErrorBody", "Receipt"):
            assert name in schemas, name
        assert any(name.startswith(("And", "NumLiteral")) for name in schemas)  # the query tree
        counts = document["paths"]["/v1/datasets/{dataset_id}/counts"]["post"]
        body = counts["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/NoisyCountRequest"}
        headers = {p["name"] for p in counts["parameters"] if p["in"] == "header"}
        assert "Idempotency-Key" in headers
