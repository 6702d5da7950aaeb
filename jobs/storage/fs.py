"""Files under the storage root, by URI: the one place that knows a path may not be local.

Every file the product keeps under ``Settings.storage_root`` besides Delta tables (checkpoint
files it reads, progress logs, stream-run records, recommendations, the gate's state) is read and
written through these functions. One rule: a local path (no scheme, or ``file:``) is served by
Python's own file calls, exactly as before; any other URI (``s3a://bucket/...``, ``hdfs://...``)
goes through Hadoop's FileSystem API in Spark's JVM, the same code and configuration Spark uses
for the tables and checkpoints themselves (``spark.hadoop.*`` in ``Settings.spark_conf``).

A process that reaches a remote URI without a Spark session starts one (``get_spark``); a local
root never needs one. Object stores have no append and no atomic directory rename: ``append_text``
rewrites the object there, and ``rename`` of a folder is a copy then a delete (one writer at a time,
as everywhere in joinshift).

A Spark Connect client process (``spark_remote``) has no JVM to ask: there a URI is refused with
:class:`RemoteFilesUnreachable`, a one-line message naming what to do. The Connect server reads
and writes Delta tables and checkpoints on any file system; these files need a storage root this
process reaches itself (a local path, or the bucket mounted) or a Spark driver of its own.

Example::

    fs.write_text("s3a://bucket/joinshift/stream_runs/tiny.json", "{}")
    fs.read_text("s3a://bucket/joinshift/stream_runs/tiny.json")   # '{}'
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


def local(uri: str | Path) -> Path | None:
    """The local path of ``uri`` (``file:`` URIs accepted), or None when it names remote storage."""
    s = str(uri)
    m = _SCHEME.match(s)
    if m is None:
        return Path(s)
    if m.group(1).lower() != "file":
        return None
    s = s[len("file:") :]
    return Path("/" + s.lstrip("/")) if s.startswith("//") else Path(s)


def is_local(uri: str | Path) -> bool:
    return local(uri) is not None


def join(uri: str | Path, *parts: str) -> str:
    """``uri/part/...`` for a local path or a URI alike."""
    return "/".join([str(uri).rstrip("/"), *parts])


def name(uri: str | Path) -> str:
    return str(uri).rstrip("/").rsplit("/", 1)[-1]


# ------------------------------------------------------------------------ Hadoop's side


class RemoteFilesUnreachable(RuntimeError):
    """A URI under the storage root in a process whose Spark is a Connect client (no JVM here)."""


def _hadoop(uri: str) -> tuple[Any, Any, Any]:
    """``(jvm, FileSystem, Path)`` of a remote URI, in the running Spark session's JVM."""
    from pyspark import SparkContext

    if "SPARK_CONNECT_MODE_ENABLED" in os.environ:  # pyspark's mark of a Connect client process
        raise RemoteFilesUnreachable(
            f"{uri}: with spark_remote set, joinshift's own files under a URI storage root cannot be "
            "reached (a Spark Connect client has no Hadoop FileSystem); use a local or mounted "
            "storage_root, or unset JOINSHIFT_SPARK_REMOTE for this command"
        )
    sc = SparkContext._active_spark_context
    if sc is None:
        from jobs.storage.spark import get_spark

        sc = get_spark("joinshift-fs", classic=True).sparkContext
    jvm = sc._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)  # type: ignore[union-attr]
    return jvm, path.getFileSystem(sc._jsc.hadoopConfiguration()), path


def _missing(e: Exception) -> bool:
    return "FileNotFoundException" in str(e)


def exists(uri: str | Path) -> bool:
    p = local(uri)
    if p is not None:
        return p.exists()
    _, fs, path = _hadoop(str(uri))
    return bool(fs.exists(path))


def is_dir(uri: str | Path) -> bool:
    p = local(uri)
    if p is not None:
        return p.is_dir()
    _, fs, path = _hadoop(str(uri))
    return bool(fs.exists(path) and fs.getFileStatus(path).isDirectory())


def read_bytes(uri: str | Path, tail: int | None = None) -> bytes:
    """The file's bytes (its last ``tail`` bytes when given); FileNotFoundError if it is missing."""
    p = local(uri)
    if p is not None:
        with open(p, "rb") as f:
            if tail is not None:
                f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            return f.read()
    jvm, fs, path = _hadoop(str(uri))
    try:
        stream = fs.open(path)
    except Exception as e:
        if _missing(e):
            raise FileNotFoundError(str(uri)) from None
        raise
    try:
        if tail is not None:
            stream.seek(max(0, int(fs.getFileStatus(path).getLen()) - tail))
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def read_text(uri: str | Path, tail: int | None = None) -> str:
    return read_bytes(uri, tail).decode("utf-8", errors="replace" if tail is not None else "strict")


def write_text(uri: str | Path, text: str) -> None:
    """Replace the file with ``text`` (parents created); readers never see half of it: a local
    file is written aside and renamed, an object store makes an object visible whole on close."""
    p = local(uri)
    if p is not None:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(p)
        return
    _, fs, path = _hadoop(str(uri))
    out = fs.create(path, True)
    try:
        out.write(text.encode("utf-8"))
    finally:
        out.close()


def append_text(uri: str | Path, text: str) -> None:
    """Add ``text`` at the end of the file (created if missing). Where the file system cannot
    append (object stores), the file is rewritten whole."""
    p = local(uri)
    if p is not None:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a") as f:
            f.write(text)
        return
    _, fs, path = _hadoop(str(uri))
    if fs.exists(path) and fs.hasPathCapability(path, "fs.capability.paths.append"):
        out = fs.append(path)
        try:
            out.write(text.encode("utf-8"))
        finally:
            out.close()
        return
    try:
        before = read_text(uri)
    except FileNotFoundError:
        before = ""
    write_text(uri, before + text)


def listdir(uri: str | Path) -> list[tuple[str, bool]]:
    """``(name, is a folder)`` of a folder's entries, sorted by name; [] if it is missing."""
    p = local(uri)
    if p is not None:
        return sorted((c.name, c.is_dir()) for c in p.iterdir()) if p.is_dir() else []
    _, fs, path = _hadoop(str(uri))
    try:
        entries = fs.listStatus(path)
    except Exception as e:
        if _missing(e):
            return []
        raise
    return sorted((str(st.getPath().getName()), bool(st.isDirectory())) for st in entries)


def size(uri: str | Path) -> int:
    """Bytes of a file, or of every file under a folder (0 if missing)."""
    p = local(uri)
    if p is not None:
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0
    _, fs, path = _hadoop(str(uri))
    return int(fs.getContentSummary(path).getLength()) if fs.exists(path) else 0


def delete(uri: str | Path) -> None:
    """Remove a file or a whole folder; nothing if it is missing."""
    p = local(uri)
    if p is not None:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        return
    _, fs, path = _hadoop(str(uri))
    fs.delete(path, True)


def rename(src: str | Path, dst: str | Path) -> None:
    """Move a file or folder to ``dst`` (which must not exist; parents created)."""
    ps, pd = local(src), local(dst)
    if ps is not None and pd is not None:
        pd.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(ps), str(pd))
        return
    if ps is None and pd is None:
        _, fs, sp = _hadoop(str(src))
        _, _, dp = _hadoop(str(dst))
        fs.mkdirs(dp.getParent())
        if not fs.rename(sp, dp):
            raise OSError(f"cannot rename {src} to {dst}")
        return
    copy(src, dst)
    delete(src)


def copy(src: str | Path, dst: str | Path) -> None:
    """Copy a file or a folder's whole tree to ``dst`` (local or remote, either way)."""
    ps, pd = local(src), local(dst)
    if ps is not None and pd is not None:
        if ps.is_dir():
            shutil.copytree(ps, pd, symlinks=True, copy_function=shutil.copy2)
        else:
            pd.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ps, pd)
        return
    jvm, sfs, sp = _hadoop(str(src) if ps is None else ps.resolve().as_uri())
    _, dfs, dp = _hadoop(str(dst) if pd is None else pd.resolve().as_uri())
    if not jvm.org.apache.hadoop.fs.FileUtil.copy(sfs, sp, dfs, dp, False, sfs.getConf()):
        raise OSError(f"cannot copy {src} to {dst}")
