"""The object-store port (issue 26): where committed partition copies outlive every worker.

One small interface, :class:`ObjectStore`, with two implementations that pass one conformance
suite (tests/transports/test_objstore_conformance.py):

- :class:`MemoryObjectStore`, the in-memory twin for unit tests;
- :class:`S3ObjectStore`, any S3-compatible server through ``obstore`` (the Rust
  ``object_store`` crate; chosen over boto3 on throughput and CPU, BENCHMARKS.md "Object-store
  client"). Never a hand-written S3 client.

A store is named by a URL, ``s3://BUCKET/PREFIX`` (or ``memory://NAME`` for the twin). Keys are
relative to the prefix. The endpoint and credentials come from the standard AWS variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``) or an
AWS profile (``AWS_PROFILE``, ``~/.aws/credentials`` and ``~/.aws/config``), as every S3 tool
reads them.

Objects are written once, whole and final: ``put``/``put_parts`` are atomic (a big file goes up as
a multipart upload that the server assembles on completion), never a temporary key renamed
afterwards (a rename is a copy in an object store). ``get_range`` never returns a short read: a
range past the end of an object is an :class:`ObjectStoreError`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# a file bigger than this goes up as a multipart upload in parts of this size
MULTIPART_PART = 8 << 20
# parts of one multipart upload in flight at once: what one upload holds in memory is
# MULTIPART_PART * MULTIPART_CONCURRENCY
MULTIPART_CONCURRENCY = 4
# the part size of a streamed writer (``open_writer``): S3's smallest part but the last
WRITER_PART = 5 << 20


class ObjectStoreError(Exception):
    """An object-store request failed, or an object is not what its reader was promised."""


class ObjectNotFound(ObjectStoreError):
    """No object under this key."""


@dataclass(frozen=True, slots=True, order=True)
class ObjectInfo:
    key: str  # relative to the store's prefix
    size: int
    modified: float = 0.0  # when it was written, seconds since the epoch (the server's clock)


class ObjectWriter(Protocol):
    """One object written piece by piece (``ObjectStore.open_writer``): nothing is visible under
    its key until ``close`` completes it, whole and final; ``abort`` leaves nothing behind.
    It holds at most two parts in memory (the one filling, the one uploading)."""

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data`` (ObjectStoreError: the upload failed; the writer is then unusable)."""
        ...

    def close(self) -> None:
        """Complete the upload: the object is final (ObjectStoreError: it is not)."""
        ...

    def abort(self) -> None:
        """Give the upload up: no object appears (idempotent; a no-op after ``close``)."""
        ...


class ObjectStore(Protocol):
    """The port: a bucket and a prefix, keys relative to it."""

    url: str

    def put(self, key: str, data: bytes) -> None: ...

    def put_parts(self, key: str, parts: Iterable[bytes]) -> int:
        """Upload ``parts`` in order as one final object, a multipart upload holding at most
        MULTIPART_PART * MULTIPART_CONCURRENCY bytes in flight; its size."""
        ...

    def open_writer(self, key: str, part: int = WRITER_PART) -> ObjectWriter:
        """A writer of one final object under ``key``, streamed as a multipart upload in parts
        of ``part`` bytes (one PUT at ``close`` when it stays smaller)."""
        ...

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Exactly ``length`` bytes from ``start``, or ObjectStoreError (never a short read)."""
        ...

    def size(self, key: str) -> int | None:
        """The object's size, None when there is no such object."""
        ...

    def list(self, prefix: str = "") -> list[ObjectInfo]: ...

    def walk(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The objects under ``prefix`` as a stream, in no particular order (a listing of a
        big bucket in pages, never held whole in memory)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Delete these objects; a missing one is not an error."""
        ...

    def close(self) -> None: ...


def parse_url(url: str) -> tuple[str, str, str]:
    """``s3://BUCKET/PREFIX`` -> ("s3", BUCKET, PREFIX without slashes at either end)."""
    parts = urlsplit(url)
    if parts.scheme not in ("s3", "memory") or not parts.netloc:
        raise ValueError(f"not an object-store url: {url!r} (expected s3://BUCKET/PREFIX)")
    return parts.scheme, parts.netloc, parts.path.strip("/")


def open_object_store(url: str) -> ObjectStore:
    """The store a URL names: ``s3://BUCKET/PREFIX`` or ``memory://NAME/PREFIX``."""
    scheme, bucket, prefix = parse_url(url)
    if scheme == "memory":
        return MemoryObjectStore(url, _MEMORY_BUCKETS.setdefault(bucket, _Bucket()), prefix)
    return S3ObjectStore(url, bucket, prefix)


def _check_range(key: str, start: int, length: int) -> None:
    if start < 0 or length <= 0:
        raise ObjectStoreError(f"object {key}: bad range start={start} length={length}")


def _short(key: str, start: int, length: int, got: int) -> ObjectStoreError:
    return ObjectStoreError(
        f"object {key}: asked for {length} bytes at {start}, it holds only {got} there (damaged or truncated)"
    )


class _Bucket:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, bytes] = {}
        self.modified: dict[str, float] = {}


# memory:// buckets by name, shared by every MemoryObjectStore of this process (a writer and a
# reader in one test see the same objects, as two processes would see one S3 bucket)
_MEMORY_BUCKETS: dict[str, _Bucket] = {}


class MemoryObjectStore:
    """The in-memory twin: a dict of immutable byte strings behind a lock."""

    def __init__(self, url: str = "memory://twin", bucket: _Bucket | None = None, prefix: str = "") -> None:
        self.url = url
        self._bucket = bucket if bucket is not None else _Bucket()
        self._prefix = f"{prefix}/" if prefix else ""

    def put(self, key: str, data: bytes) -> None:
        with self._bucket.lock:
            self._bucket.objects[self._prefix + key] = bytes(data)
            self._bucket.modified[self._prefix + key] = time.time()

    def put_parts(self, key: str, parts: Iterable[bytes]) -> int:
        data = b"".join(parts)
        self.put(key, data)
        return len(data)

    def open_writer(self, key: str, part: int = WRITER_PART) -> ObjectWriter:
        return _MemoryWriter(self, key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        _check_range(key, start, length)
        with self._bucket.lock:
            data = self._bucket.objects.get(self._prefix + key)
        if data is None:
            raise ObjectNotFound(f"no object {key}")
        out = data[start : start + length]
        if len(out) != length:
            raise _short(key, start, length, len(out))
        return out

    def size(self, key: str) -> int | None:
        with self._bucket.lock:
            data = self._bucket.objects.get(self._prefix + key)
        return None if data is None else len(data)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return sorted(self.walk(prefix))

    def walk(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full = self._prefix + prefix
        b = self._bucket
        with b.lock:
            found = [(k, len(v), b.modified.get(k, 0.0)) for k, v in b.objects.items() if k.startswith(full)]
        return iter([ObjectInfo(k[len(self._prefix) :], n, t) for k, n, t in found])

    def age(self, key: str, seconds: float) -> None:
        """Make an object look ``seconds`` older (the orphan sweep's tests)."""
        with self._bucket.lock:
            self._bucket.modified[self._prefix + key] -= seconds

    def delete(self, keys: Sequence[str]) -> None:
        with self._bucket.lock:
            for key in keys:
                self._bucket.objects.pop(self._prefix + key, None)
                self._bucket.modified.pop(self._prefix + key, None)

    def corrupt(self, key: str, offset: int) -> None:
        """Flip one byte of an object (the damaged-object tests)."""
        with self._bucket.lock:
            data = bytearray(self._bucket.objects[self._prefix + key])
            data[offset] ^= 0xFF
            self._bucket.objects[self._prefix + key] = bytes(data)

    def close(self) -> None:
        return None


class _MemoryWriter:
    """The twin's writer: a bytearray, put whole at ``close``."""

    def __init__(self, store: MemoryObjectStore, key: str) -> None:
        self._store, self._key = store, key
        self._data: bytearray | None = bytearray()

    def write(self, data: bytes | memoryview) -> None:
        if self._data is None:
            raise ObjectStoreError(f"put {self._key}: the writer is closed")
        self._data += data

    def close(self) -> None:
        if self._data is None:
            raise ObjectStoreError(f"put {self._key}: the writer is closed")
        data, self._data = bytes(self._data), None
        self._store.put(self._key, data)

    def abort(self) -> None:
        self._data = None


def _s3_config() -> dict[str, Any]:
    """obstore's S3 settings from the standard AWS variables (obstore reads most of them itself;
    the endpoint is spelled AWS_ENDPOINT_URL by the AWS CLI and boto3, so it is passed on)."""
    config: dict[str, Any] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        config["endpoint"] = endpoint
        # a local S3-compatible server (SeaweedFS, MinIO) answers on path-style URLs
        config["virtual_hosted_style_request"] = False
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        config["region"] = region
    return config


def _wants_profile() -> bool:
    """Whether credentials come from an AWS profile, as the AWS CLI and boto3 resolve it:
    ``AWS_PROFILE`` is set, or no key is in the environment and a shared credentials or config
    file exists (``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_CONFIG_FILE``, or under ``~/.aws``)."""
    if os.environ.get("AWS_PROFILE"):
        return True
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return False
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials",
        os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config",
    )
    return any(os.path.isfile(os.path.expanduser(f)) for f in files)


def _profile_provider(config: dict[str, Any]) -> Any:
    """obstore's boto3 credential provider for the profile (refreshed as boto3 refreshes it:
    SSO, assume-role, a credential process); the profile's region and ``endpoint_url`` fill
    ``config`` where the environment set none.

    Raises:
        ObjectStoreError: boto3 is missing, or the profile is unknown or has no credentials.
    """
    try:
        import boto3  # type: ignore[import-untyped]
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError as exc:
        raise ObjectStoreError(
            f"credentials from an AWS profile need boto3 ({exc}): pip install 'croupier[aws]',"
            " or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ) from exc
    try:
        session = boto3.Session()
        if session.get_credentials() is None:
            raise ObjectStoreError(f"AWS profile {session.profile_name!r} has no credentials")
        scoped = session._session.get_scoped_config()
    except ObjectStoreError:
        raise
    except Exception as exc:  # botocore's ProfileNotFound, a malformed file
        raise ObjectStoreError(f"AWS profile: {exc}") from exc
    if "endpoint" not in config and scoped.get("endpoint_url"):
        config["endpoint"] = scoped["endpoint_url"]
        config["virtual_hosted_style_request"] = False
    if "region" not in config and session.region_name:
        config["region"] = session.region_name
    return Boto3CredentialProvider(session)


class S3ObjectStore:
    """An S3 bucket through obstore. Thread-safe; one connection pool per store.

    Credentials: the ``AWS_*`` variables (obstore reads them, and the instance or container
    role when none is set), or an AWS profile (``AWS_PROFILE``, ``~/.aws/credentials``) through
    obstore's boto3 credential provider (the ``aws`` extra).
    """

    def __init__(self, url: str, bucket: str, prefix: str) -> None:
        from obstore.store import S3Store

        self.url = url
        config = _s3_config()
        provider = _profile_provider(config) if _wants_profile() else None
        allow_http = str(config.get("endpoint", "")).startswith("http://")
        self._store: Any = S3Store(
            bucket,
            prefix=prefix or None,
            config=config,  # type: ignore[arg-type]
            client_options={"allow_http": allow_http},
            credential_provider=provider,
        )

    def put(self, key: str, data: bytes) -> None:
        import obstore

        try:
            obstore.put(self._store, key, data, use_multipart=False)
        except Exception as exc:
            raise ObjectStoreError(f"put {key}: {exc}") from exc

    def put_parts(self, key: str, parts: Iterable[bytes]) -> int:
        import obstore

        size = 0

        def counted() -> Iterator[bytes]:
            nonlocal size
            for part in parts:
                size += len(part)
                yield part

        try:
            obstore.put(
                self._store,
                key,
                counted(),
                chunk_size=MULTIPART_PART,
                max_concurrency=MULTIPART_CONCURRENCY,
            )
        except Exception as exc:
            raise ObjectStoreError(f"put {key}: {exc}") from exc
        return size

    def open_writer(self, key: str, part: int = WRITER_PART) -> ObjectWriter:
        return _S3Writer(self._store, key, part)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        import obstore

        _check_range(key, start, length)
        try:
            out = bytes(obstore.get_range(self._store, key, start=start, length=length))
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"no object {key}") from exc
        except Exception as exc:
            raise _as_error(key, exc) from exc
        if len(out) != length:
            raise _short(key, start, length, len(out))
        return out

    def size(self, key: str) -> int | None:
        import obstore

        try:
            return int(obstore.head(self._store, key)["size"])
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise ObjectStoreError(f"head {key}: {exc}") from exc

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return sorted(self.walk(prefix))

    def walk(self, prefix: str = "") -> Iterator[ObjectInfo]:
        import obstore

        try:
            for batch in obstore.list(self._store, prefix or None):
                for m in batch:
                    modified = m.get("last_modified")
                    stamp = modified.timestamp() if modified is not None else 0.0
                    yield ObjectInfo(str(m["path"]), int(m["size"]), stamp)
        except Exception as exc:
            raise ObjectStoreError(f"list {prefix}: {exc}") from exc

    def delete(self, keys: Sequence[str]) -> None:
        import obstore

        if not keys:
            return
        try:
            obstore.delete(self._store, list(keys))
        except FileNotFoundError:
            return
        except Exception as exc:
            raise ObjectStoreError(f"delete {len(keys)} objects: {exc}") from exc

    def close(self) -> None:
        self._store = None


class _S3Writer:
    """obstore's buffered writer: parts of ``part`` bytes, one uploading at a time."""

    def __init__(self, store: Any, key: str, part: int) -> None:
        import obstore

        self._key = key
        self._file: Any = obstore.open_writer(store, key, buffer_size=part, max_concurrency=1)

    def write(self, data: bytes | memoryview) -> None:
        if self._file is None:
            raise ObjectStoreError(f"put {self._key}: the writer is closed")
        try:
            self._file.write(data)
        except Exception as exc:
            self.abort()
            raise ObjectStoreError(f"put {self._key}: {exc}") from exc

    def close(self) -> None:
        if self._file is None:
            raise ObjectStoreError(f"put {self._key}: the writer is closed")
        file, self._file = self._file, None
        try:
            file.close()
        except Exception as exc:
            raise ObjectStoreError(f"put {self._key}: {exc}") from exc

    def abort(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        try:  # leaving the context with an exception aborts the multipart upload
            file.__exit__(ObjectStoreError, ObjectStoreError("aborted"), None)
        except Exception as exc:  # an incomplete upload is never an object: nothing is visible
            log.warning("aborting the upload of %s: %s", self._key, exc)


def _as_error(key: str, exc: Exception) -> ObjectStoreError:
    text = str(exc)
    if "NotFound" in type(exc).__name__ or "not found" in text.lower():
        return ObjectNotFound(f"no object {key}")
    return ObjectStoreError(f"get {key}: {text}")


def object_key(app_id: str, shuffle_id: int, partition: int, epoch: int, role: str, suffix: str) -> str:
    """Where a partition copy's objects live, relative to the store's prefix:
    ``<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.data`` (the batches, as in the worker's
    file) and ``.index`` (its chunk index and the data object's BLAKE3, written last: an index
    object means the data object is whole)."""
    return f"{app_id}/{shuffle_id}/{partition}-{epoch}-{role}.{suffix}"


def app_prefix(app_id: str) -> str:
    """The prefix of every object of one app (deleted when it is unregistered or expires)."""
    return f"{app_id}/"
