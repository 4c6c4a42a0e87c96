"""Upload forms read as they arrive: each file part is written straight into its file in an
owner-only folder, and the text fields are kept in memory (issue #23, lean loading).

Starlette's own form parser spools every file part into a temporary file of the system's
temporary folder, which the registration route then had to copy into the data folder: two
writes of every uploaded byte (at 10⁷ rows, 2.3 GB), the second one after the upload ended.
Here every byte is written once, in blocks of :data:`WRITE_BLOCK_BYTES` on a worker thread (the
event loop never waits on the disk), into the folder that the dataset's folder takes the files
from by a rename.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final
from urllib.parse import parse_qsl

import anyio.to_thread
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from dpmine_server.api.limits import UPLOAD_FORM_ALLOWANCE
from dpmine_server.data.arriving import ArrivingFile, track
from dpmine_server.errors import InvalidRequest, PayloadTooLarge, ServerError
from dpmine_server.services.datasets import StoredFile

if TYPE_CHECKING:  # a TypedDict that python-multipart defines for type checkers only
    from python_multipart.multipart import MultipartCallbacks

__all__ = ["WRITE_BLOCK_BYTES", "UploadForm", "form_schema", "receive_upload_form"]

#: File bytes gathered before one write on a worker thread.
WRITE_BLOCK_BYTES: Final = 4 * 1024**2


@dataclass
class UploadForm:
    """A received form: its text fields and its files (saved, movable into a dataset folder)."""

    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, StoredFile] = field(default_factory=dict)
    #: Each file part's arrival (``data/arriving.py``): readable while it is written, whole once
    #: the form is accepted. The caller :func:`~dpmine_server.data.arriving.release`\ s them
    #: when nothing reads the files as arriving any more.
    arrivals: dict[str, ArrivingFile] = field(default_factory=dict)


@dataclass
class _Part:
    """The part being read: its headers, then its text or its open file."""

    headers: dict[bytes, bytes] = field(default_factory=dict)
    header_name: bytes = b""
    header_value: bytes = b""
    name: str = ""
    text: bytearray = field(default_factory=bytearray)
    handle: BinaryIO | None = None


def _check_field(
    name: str,
    form: UploadForm,
    text_fields: Collection[str],
    file_fields: Collection[str],
    *,
    is_file: bool,
) -> None:
    """Refuse an unknown or repeated field, a file where text is due, or text where a file is."""
    known = [*text_fields, *file_fields]
    if name not in known:
        raise InvalidRequest(f"unknown form field {name!r}; this route takes {known}")
    if name in form.fields or name in form.files:
        raise InvalidRequest(f"form field {name!r} is sent twice; send it once")
    if name in file_fields and not is_file:
        raise InvalidRequest(f"form field {name!r} must be a file upload (multipart/form-data)")
    if name in text_fields and is_file:
        raise InvalidRequest(f"form field {name!r} must be text, not a file")


@dataclass
class _FormReader:
    """The parser's callbacks: file bytes wait in ``pending`` for the next write."""

    folder: Path
    text_fields: Collection[str]
    file_fields: Collection[str]
    limit: int
    form: UploadForm = field(default_factory=UploadForm)
    part: _Part = field(default_factory=_Part)
    handles: list[BinaryIO] = field(default_factory=list)
    #: The arrival of each open file part, told after each write how much is on disk.
    arrival_of: dict[BinaryIO, ArrivingFile] = field(default_factory=dict)
    pending: list[tuple[BinaryIO, bytes]] = field(default_factory=list)
    pending_bytes: int = 0
    file_bytes: int = 0
    text_bytes: int = 0
    #: The closing boundary was read: a body cut short is never taken for a whole form.
    ended: bool = False

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._begin,
            "on_header_field": self._header_name,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._data,
            "on_part_end": self._end,
            "on_end": self._form_end,
        }

    def _begin(self) -> None:
        self.part = _Part()

    def _header_name(self, data: bytes, start: int, end: int) -> None:
        self.part.header_name += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self.part.header_value += data[start:end]

    def _header_end(self) -> None:
        part = self.part
        part.headers[part.header_name.strip().lower()] = part.header_value.strip()
        part.header_name, part.header_value = b"", b""

    def _headers_finished(self) -> None:
        part = self.part
        _, options = parse_options_header(part.headers.get(b"content-disposition", b""))
        if b"name" not in options:
            raise InvalidRequest("a form part has no name (Content-Disposition: form-data; name=…)")
        part.name = options[b"name"].decode("utf-8", "replace")
        is_file = b"filename" in options
        _check_field(part.name, self.form, self.text_fields, self.file_fields, is_file=is_file)
        if is_file:
            target = self.folder / part.name  # a fixed field name: nothing else names the file
            part.handle = target.open("xb")
            self.handles.append(part.handle)
            self.arrival_of[part.handle] = self.form.arrivals[part.name] = track(part.handle)
            filename = options[b"filename"].decode("utf-8", "replace")
            self.form.files[part.name] = StoredFile(
                path=target, name=Path(filename).name or part.name, movable=True
            )

    def _data(self, data: bytes, start: int, end: int) -> None:
        part, size = self.part, end - start
        if part.handle is None:
            self.text_bytes += size
            if self.text_bytes > UPLOAD_FORM_ALLOWANCE:
                raise PayloadTooLarge(
                    f"the form's text fields exceed {UPLOAD_FORM_ALLOWANCE} bytes; "
                    "send the files as file parts"
                )
            part.text += data[start:end]
            return
        self.file_bytes += size
        if self.file_bytes > self.limit:
            raise PayloadTooLarge(
                f"the upload exceeds the server's limit of {self.limit} bytes "
                "(DPMINE_MAX_UPLOAD_BYTES); register large data from an SQL source"
            )
        self.pending.append((part.handle, data[start:end]))
        self.pending_bytes += size

    def _end(self) -> None:
        part = self.part
        if part.handle is None and part.name:
            self.form.fields[part.name] = part.text.decode("utf-8", "replace")

    def _form_end(self) -> None:
        self.ended = True

    def take_pending(self) -> list[tuple[BinaryIO, bytes]]:
        pending, self.pending, self.pending_bytes = self.pending, [], 0
        return pending


def _write(pending: list[tuple[BinaryIO, bytes]], arrival_of: dict[BinaryIO, ArrivingFile]) -> None:
    """Write the gathered bytes, then flush each file and tell its readers how much is on disk."""
    written: dict[BinaryIO, None] = {}
    for handle, data in pending:
        handle.write(data)
        written[handle] = None
    for handle in written:
        handle.flush()
        arrival_of[handle].grew(handle.tell())


def _close(handles: list[BinaryIO]) -> None:
    for handle in handles:
        handle.close()


def _text_form(
    body: bytes, text_fields: Collection[str], file_fields: Collection[str]
) -> UploadForm:
    """A form of text fields only (``application/x-www-form-urlencoded``), checked as the
    multipart form's text fields are."""
    form = UploadForm()
    for name, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        _check_field(name, form, text_fields, file_fields, is_file=False)
        form.fields[name] = value
    return form


async def _body_chunks(request: Request) -> AsyncIterator[bytes]:
    """The body's chunks. A failure to read them (other than the client going away) is the
    request's fault, as FastAPI takes it for the forms it parses: a 422 that says so. (A body
    above its size limit raises here too, and the size-limit middleware answers 413.)"""
    stream = request.stream()
    while True:
        try:
            chunk = await anext(stream)
        except StopAsyncIteration:
            return
        except ClientDisconnect:
            raise
        except Exception as error:
            raise InvalidRequest("the request body could not be read; send it again") from error
        yield chunk


async def receive_upload_form(
    request: Request,
    folder: Path,
    *,
    text_fields: Collection[str],
    file_fields: Collection[str],
    limit: int,
    form: UploadForm | None = None,
    on_first_file: Callable[[UploadForm], None] | None = None,
) -> UploadForm:
    """Read a ``multipart/form-data`` body into ``folder`` (file part ``f`` becomes
    ``folder / f``) and memory. Refuses, with a message that says what to fix: another content
    type, an unknown or repeated field, a file where text is due or the reverse, file parts
    above ``limit`` bytes in all, malformed multipart. The files are closed on return or error;
    the caller removes ``folder``.

    ``form``: the form to fill (the caller's, so that it holds the arrivals even when this
    raises); ``on_first_file``: called once, when the first file part has begun, with the form
    so far (the text fields sent before it), so that the caller may start reading the file as it
    arrives. The arrivals are done only when this returns, and failed when it raises.
    """
    form = form if form is not None else UploadForm()
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    if content_type == b"application/x-www-form-urlencoded":  # text fields only
        text = _text_form(await request.body(), text_fields, file_fields)
        form.fields.update(text.fields)
        return form
    if content_type != b"multipart/form-data" or b"boundary" not in options:
        raise InvalidRequest(
            "send the form as multipart/form-data (with a boundary), "
            f"got {request.headers.get('content-type', 'no content type')!r}"
        )
    reader = _FormReader(folder, text_fields, file_fields, limit, form)
    parser = MultipartParser(options[b"boundary"], reader.callbacks())
    notify = on_first_file
    try:
        async for chunk in _body_chunks(request):
            parser.write(chunk)
            if notify is not None and form.files:
                notify(form)
                notify = None
            if reader.pending_bytes >= WRITE_BLOCK_BYTES:
                await anyio.to_thread.run_sync(_write, reader.take_pending(), reader.arrival_of)
        parser.finalize()
        await anyio.to_thread.run_sync(_write, reader.take_pending(), reader.arrival_of)
        if not reader.ended:
            raise InvalidRequest(
                "the body ends before the form's closing boundary; send the whole form again"
            )
    except BaseException as error:
        why = (
            f"the upload failed: {error}"
            if isinstance(error, ServerError)
            else "the upload did not complete"
        )
        for arrival in form.arrivals.values():
            arrival.failed(why)
        if isinstance(error, FormParserError):
            raise InvalidRequest(f"the body is not valid multipart/form-data: {error}") from None
        raise
    finally:
        await anyio.to_thread.run_sync(_close, reader.handles)
    for arrival in form.arrivals.values():
        arrival.done()
    return form


def form_schema(
    name: str,
    text: dict[str, str],
    files: dict[str, str],
    *,
    required: Collection[str],
    enums: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a form read by :func:`receive_upload_form` (FastAPI cannot
    see fields that a route reads itself), in the shape FastAPI gives ``Form`` and ``File``
    parameters: required text, optional text or null, optional files or null, and an ``enum``
    for a text field with fixed values."""
    properties: dict[str, Any] = {}
    for field_name, about in text.items():
        values = (enums or {}).get(field_name)
        text_type: dict[str, Any] = {"type": "string"} | ({"enum": values} if values else {})
        kind = text_type if field_name in required else {"anyOf": [text_type, {"type": "null"}]}
        properties[field_name] = kind | {"title": field_name.title(), "description": about}
    binary = {"type": "string", "contentMediaType": "application/octet-stream"}
    for field_name, about in files.items():
        properties[field_name] = {
            "anyOf": [binary, {"type": "null"}],
            "title": field_name.title(),
            "description": about,
        }
    schema = {"properties": properties, "type": "object", "required": [*required], "title": name}
    return {
        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}
    }
