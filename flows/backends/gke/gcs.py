"""``gs://`` storage: the Storage protocol of flows/core/storage.py on GCS.

GCS has no directories: a "directory" exists when some object has its name as a prefix, and
its children are the next path segment of those names (the ``prefixes`` of a delimited
listing). ``write_text`` takes ``if_generation_match`` so a caller that must not clobber a
concurrent writer (a lineage record, a lock) gets GCS's 412 instead of a lost update.
Output checks are not here: flows/core/verify.py and flows/core/manifest.py work on any
Storage, so the rehearsal (file://) and GKE (gs://) check outputs with the same code.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from urllib.parse import urlparse

from google.api_core.exceptions import NotFound, PreconditionFailed
from google.api_core.retry import Retry
from google.cloud import storage as gcs

from flows.core.storage import FileStat

# Uploads of whole small texts are idempotent in effect; retry them like reads (GCS 503s).
WRITE_RETRY = Retry(initial=1.0, maximum=30.0, multiplier=2.0, timeout=120.0)


def split_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "gs" or not parsed.netloc:
        raise ValueError(f"not a gs:// URI: {uri}")
    return parsed.netloc, parsed.path.lstrip("/")


class GcsStorage:
    """Storage on GCS through google-cloud-storage (tests: fake-gcs-server)."""

    def __init__(self, client: gcs.Client | None = None) -> None:
        self._client = client

    @property
    def client(self) -> gcs.Client:
        if self._client is None:  # lazily: building a client looks for credentials
            self._client = gcs.Client()
        return self._client

    def _blob(self, uri: str) -> gcs.Blob:
        bucket, name = split_uri(uri)
        return self.client.bucket(bucket).blob(name)

    def local_path(self, uri: str) -> Path | None:
        return None

    def exists(self, uri: str) -> bool:
        """An object of that name, or any object under it (a "directory")."""
        bucket, name = split_uri(uri)
        if name and self._blob(uri).exists():
            return True
        prefix = name.rstrip("/") + "/" if name else ""
        blobs = self.client.list_blobs(bucket, prefix=prefix, max_results=1)
        return any(True for _ in blobs)

    def read_text(self, uri: str) -> str | None:
        try:
            return self._blob(uri).download_as_text()
        except NotFound:
            return None

    def generation(self, uri: str) -> int | None:
        """The object's generation (None if absent): pass it to write_text to update safely."""
        blob = self._blob(uri)
        try:
            blob.reload()
        except NotFound:
            return None
        return blob.generation

    def write_text(self, uri: str, text: str, *, if_generation_match: int | None = None) -> None:
        """Replace the object; with ``if_generation_match`` only if it is still that generation
        (0: only if absent), else google.api_core.exceptions.PreconditionFailed."""
        self._blob(uri).upload_from_string(
            text, content_type="text/plain; charset=utf-8",
            if_generation_match=if_generation_match, retry=WRITE_RETRY)

    def create_text(self, uri: str, text: str) -> bool:
        """Only if absent: ifGenerationMatch=0 makes GCS refuse (412) the upload when an
        object of that name exists, so a concurrent writer never overwrites another's record.
        A retried upload whose first try landed meets its own object: False, nothing lost."""
        try:
            self.write_text(uri, text, if_generation_match=0)
        except PreconditionFailed:
            return False
        return True

    def files_under(self, uri: str) -> list[str]:
        """Every object below a prefix (recursive), as gs:// URIs."""
        bucket, name = split_uri(uri)
        prefix = name.rstrip("/") + "/" if name else ""
        return sorted(f"gs://{bucket}/{blob.name}"
                      for blob in self.client.list_blobs(bucket, prefix=prefix))

    def read_bytes(self, uri: str) -> bytes | None:
        try:
            return self._blob(uri).download_as_bytes()
        except NotFound:
            return None

    def stat_tree(self, uri: str) -> dict[str, FileStat]:
        """One listing: GCS keeps size, crc32c and generation for every object."""
        bucket, name = split_uri(uri)
        found: dict[str, FileStat] = {}
        if name:
            blob = self.client.bucket(bucket).get_blob(name)
            if blob is not None:
                return {"": _stat(blob)}
        prefix = name.rstrip("/") + "/" if name else ""
        for blob in self.client.list_blobs(bucket, prefix=prefix):
            if blob.name != prefix:
                found[blob.name[len(prefix):]] = _stat(blob)
        return found

    def prune_empty(self, uri: str) -> int:
        return 0  # a GCS "directory" exists only while an object is under it

    def read_tail(self, uri: str, size: int) -> bytes | None:
        bucket, name = split_uri(uri)
        blob = self.client.bucket(bucket).get_blob(name)
        if blob is None:
            return None
        start = max(int(blob.size or 0) - size, 0)
        return blob.download_as_bytes(start=start) if blob.size else b""

    def digest(self, uri: str) -> str:
        blob = self.client.bucket(split_uri(uri)[0]).get_blob(split_uri(uri)[1])
        if blob is None:
            raise FileNotFoundError(uri)
        return _stat(blob).digest or ""

    def remove_tree(self, uri: str, keep: tuple[str, ...] = ()) -> int:
        bucket, name = split_uri(uri)
        prefix = name.rstrip("/") + "/" if name else ""
        doomed = [blob for blob in self.client.list_blobs(bucket, prefix=prefix)
                  if blob.name[len(prefix):].split("/", 1)[0] not in keep]
        for blob in doomed:
            with contextlib.suppress(NotFound):
                blob.delete()
        return len(doomed)

    def children(self, uri: str) -> list[str]:
        bucket, name = split_uri(uri)
        prefix = name.rstrip("/") + "/" if name else ""
        pages = self.client.list_blobs(bucket, prefix=prefix, delimiter="/")
        found: set[str] = set()
        for page in pages.pages:
            found |= {blob.name[len(prefix):] for blob in page if blob.name != prefix}
            found |= {p[len(prefix):].rstrip("/") for p in page.prefixes}
        return sorted(n for n in found if n)


def _stat(blob: gcs.Blob) -> FileStat:
    return FileStat(size=int(blob.size or 0), stamp=f"generation:{blob.generation}",
                    digest=f"crc32c:{blob.crc32c}" if blob.crc32c else None)
