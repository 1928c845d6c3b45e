"""Reading and writing source files, keeping their encoding and line endings."""

from __future__ import annotations

import io
import os
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class SourceError(Exception):
    """A file that cannot be read or decoded; the message says why."""


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str  # as detected: "utf-8", "utf-8-sig" (a BOM), "latin-1", ...


def decode(raw: bytes) -> Source:
    """Decode Python source bytes as the interpreter would (PEP 263, BOM)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        raise SourceError(f"invalid encoding declaration: {exc.msg}") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        declared = "" if encoding in ("utf-8", "utf-8-sig") else f" (declared {encoding})"
        raise SourceError(
            f"not valid {encoding.upper()}{declared}: byte 0x{raw[exc.start]:02x} "
            f"at offset {exc.start}; save the file as UTF-8 or declare its encoding "
            "with a `# -*- coding: ... -*-` line"
        ) from None
    except LookupError:
        raise SourceError(f"unknown encoding {encoding!r}") from None
    return Source(text, encoding)


def read_bytes(path: Path) -> bytes:
    """A file's bytes; an unreadable file is a :class:`SourceError` that says why."""
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as exc:
        raise SourceError(exc.strerror or str(exc)) from None


def read_source(path: Path) -> Source:
    return decode(read_bytes(path))


def encode(source: Source, text: str) -> bytes:
    return text.encode(source.encoding)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that no reader sees a partial file.

    The bytes go to a temporary file in the same directory, which then
    replaces the original (``os.replace`` is atomic); permissions are kept.
    """
    path = Path(os.path.realpath(path))
    mode = None
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".torchlint")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


NOTEBOOK_SUFFIX = ".ipynb"


def is_notebook(path: str) -> bool:
    """Whether a (displayed) path names a Jupyter notebook."""
    return path.lower().endswith(NOTEBOOK_SUFFIX)


def text_hash(text: str) -> str:
    """A short digest of a text (the result cache's key)."""
    import hashlib

    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
