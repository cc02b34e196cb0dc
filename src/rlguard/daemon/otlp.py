"""OTLP/HTTP logs (``POST /v1/logs``): an ``ExportLogsServiceRequest``, as protobuf
(``application/x-protobuf``) or OTLP/JSON (``application/json``), gzip-compressed or not, read
into the lines of each file it carries, in order.

What an OpenTelemetry Collector's ``filelog`` receiver sends: one LogRecord per line of a file,
its body the line (a string), its attribute ``log.file.path`` the file on the node it was read
on (``include_file_path: true``). Nothing here opens, stats or trusts that path: it is a name,
placed under a watch root (or refused) by :mod:`.pushed`.

Bounds (:class:`OtlpLimits`): the body (compressed and decompressed) is capped before it is
parsed; a line longer than ``max_line`` bytes is rejected, as ``max_log_size`` caps it at the
collector. A record without a string body or without ``log.file.path`` is rejected. Rejections
are counted and said once per kind: the answer's ``partialSuccess`` (the OTLP specification's
partial success: the collector does not retry them).

Needs the ``opentelemetry-proto`` package (``pip install 'rlguard[otlp]'``); without it the
endpoint answers 501 and says so.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

PATH_ATTRIBUTE = "log.file.path"  # the filelog receiver's, with include_file_path: true
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


@dataclass(frozen=True)
class OtlpLimits:
    """``max_body``: bytes of a request (compressed, and again decompressed); ``max_line``: bytes
    of one line."""

    max_body: int = 8 << 20
    max_line: int = 1 << 20


class OtlpError(ValueError):
    """A request refused whole: its HTTP code and why (the JSON error the client is given)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Lines:
    """What a request carried: the lines of each file (``log.file.path`` -> lines, in the
    request's order), and the records rejected with why (each reason once)."""

    files: dict[str, list[bytes]] = field(default_factory=dict)
    rejected: int = 0
    why: list[str] = field(default_factory=list)

    def reject(self, n: int, why: str) -> None:
        self.rejected += n
        if n and why not in self.why:
            self.why.append(why)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.files.values())


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header (``application/json; charset=utf-8`` -> ``application/json``)."""
    return (content_type or "").split(";")[0].strip().lower()


def inflate(body: bytes, encoding: str | None, limit: int) -> bytes:
    """``body`` decompressed per ``Content-Encoding`` (none or gzip: what the collector's
    ``otlphttp`` exporter sends), never to more than ``limit`` bytes (a gzip bomb: 413)."""
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return body
    if enc != "gzip":
        raise OtlpError(415, f"Content-Encoding {enc!r} is not supported (send gzip or none)")
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"the body is not valid gzip: {exc}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise OtlpError(413, f"the body decompresses to more than {limit} bytes")
    return out


def decode(body: bytes, content_type: str | None, limits: OtlpLimits = OtlpLimits()) -> Lines:
    """The lines of each file in an ``ExportLogsServiceRequest`` (see the module doc)."""
    try:
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    except ImportError:
        raise OtlpError(501, "this daemon cannot read OTLP: install the opentelemetry-proto package "
                             "(pip install 'rlguard[otlp]')") from None
    kind = media_type(content_type)
    req = ExportLogsServiceRequest()
    try:
        if kind == PROTOBUF:
            req.ParseFromString(body)
        elif kind == JSON:
            json_format.Parse(body.decode("utf-8"), req, ignore_unknown_fields=True)
        else:
            raise OtlpError(415, f"Content-Type {kind or 'none'!r}: send {PROTOBUF} or {JSON}")
    except (DecodeError, json_format.ParseError, UnicodeDecodeError, RecursionError) as exc:
        what = "protobuf" if kind == PROTOBUF else "OTLP/JSON"
        raise OtlpError(400, f"not a valid {what} ExportLogsServiceRequest: {str(exc)[:200]}") from None
    return lines_of(req, limits.max_line)


def lines_of(req, max_line: int) -> Lines:
    """The lines of each file in a parsed request (records in order; see the module doc)."""
    out = Lines()
    for rl in req.resource_logs:
        resource_path = _attribute(rl.resource.attributes, PATH_ATTRIBUTE)
        for sl in rl.scope_logs:
            for rec in sl.log_records:
                path = _attribute(rec.attributes, PATH_ATTRIBUTE) or resource_path
                if not path:
                    out.reject(1, f"a record without the attribute {PATH_ATTRIBUTE} (filelog: include_file_path: true)")
                    continue
                if rec.body.WhichOneof("value") != "string_value":
                    out.reject(1, "a record whose body is not a string (one line of the file)")
                    continue
                text = rec.body.string_value.encode("utf-8", "surrogateescape")
                pieces = text.rstrip(b"\r\n").split(b"\n") if text else [b""]
                kept = [p for p in pieces if len(p) <= max_line]
                out.reject(len(pieces) - len(kept), f"a line longer than {max_line} bytes (max_line)")
                if kept:
                    out.files.setdefault(path, []).extend(kept)
    return out


def _attribute(attrs, key: str) -> str | None:
    for kv in attrs:
        if kv.key == key:
            return kv.value.string_value if kv.value.WhichOneof("value") == "string_value" else None
    return None


def answer(kind: str, rejected: int, message: str) -> tuple[str, bytes]:
    """The ``ExportLogsServiceResponse`` (content type, body) in the request's encoding, with
    ``partialSuccess`` when records were rejected."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    resp = ExportLogsServiceResponse()
    if rejected:
        resp.partial_success.rejected_log_records = rejected
        resp.partial_success.error_message = message
    if media_type(kind) == PROTOBUF:
        return PROTOBUF, resp.SerializeToString()
    return JSON, json_format.MessageToJson(resp, indent=None).encode()
