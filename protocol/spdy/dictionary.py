"""The zlib dictionary every SPDY/3 header block is compressed with (SPDY/3 draft, section
2.6.10.1): header names and values common in HTTP, each as a 4-byte big-endian length and
the bytes, then a run of status codes, reason phrases, dates and media types as they are.
Both sides must use exactly these bytes (zlib checks the dictionary's Adler-32)."""

from __future__ import annotations

__all__ = ["HEADER_DICTIONARY"]

_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding "
    "accept-language accept-ranges age allow authorization cache-control connection "
    "content-base content-encoding content-language content-length content-location "
    "content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
    "server te trailer transfer-encoding upgrade user-agent vary via warning "
    "www-authenticate method get status"
).split()
_WORDS += ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]

_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
    "502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,"
    "text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch"
    "charset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)

HEADER_DICTIONARY: bytes = b"".join(
    len(w).to_bytes(4, "big") + w.encode("ascii") for w in _WORDS
) + _TAIL.encode("ascii")
"""The SPDY/3 header dictionary (1,423 bytes)."""
