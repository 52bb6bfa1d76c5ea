"""webdataset tar shards: the layout img2dataset writes and open_clip trains from.

A shard is a tar of samples; a sample is the run of consecutive members that share a key, the
member name up to the first dot of its base name (``000000012.jpg``, ``000000012.txt``,
``000000012.json`` are sample ``000000012`` with members ``jpg``, ``txt``, ``json``), as the
webdataset package groups them. From each sample capgeo takes:

- the caption: its ``.txt`` member, else the ``caption`` key (or another usual caption name) of its
  ``.json`` member; ``--text-column NAME`` names another member extension or ``.json`` key;
  ``--captions-column NAME`` a ``.json`` key holding a list of captions;
- the caption id: the key (``--id-column`` names a ``.json`` key instead); the group (image): the
  ``.json`` key ``--group-column`` names, else the first usual image key (``image_id``, ``image`` ...,
  as for tables) found in the first sample's ``.json``, else the sample's key: one image per sample,
  all the captions of a ``--captions-column`` list included. A ``--group-column`` or ``--id-column``
  key that no sample's ``.json`` holds is refused, as a missing column is. Shards carry no split.

Shards are read one after another with the standard library's tarfile (webdataset need not be
installed): the caption members are read, a ``.json`` only when its sample needs it (no caption
member, a column option naming one of its keys, or an image key found in the first ``.json``), and
image members are passed over by seeking, never read into memory (where each is, is recorded for
capgeo.images). A sample without a caption is skipped and counted. A truncated or damaged shard, a
member whose name would escape the archive (``../x``, ``/x``; nothing is ever extracted), a
caption that is not UTF-8, a broken ``.json`` and a caption or ``.json`` member declaring more than
MAX_MEMBER_BYTES (or more than the file holds) stop with one line naming the shard and the sample.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from capgeo import _json
from capgeo.captions.clean import RawCaptions
from capgeo.captions.compressed import sniff
from capgeo.captions.shards import expand_source
from capgeo.errors import DataError

if TYPE_CHECKING:
    import tarfile

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz")
#: the shard kinds, as messages list them
TAR_KINDS = ".tar, .tar.gz (.tgz), .tar.zst, .tar.bz2 (.tbz2) or .tar.xz (.txz)"
#: caption member extensions, then .json keys, tried in order when no column is named
CAPTION_MEMBERS = ("txt", "text", "caption")
CAPTION_KEYS = ("caption", "text", "txt")
#: member extensions that hold the sample's image (capgeo.images.sources.IMAGE_MEMBERS)
IMAGE_MEMBERS = ("jpg", "jpeg", "png", "webp")
#: the tar format's block; an archive ends with at least one block of zeros after its last member
BLOCK = 512
#: members kept in tarfile's own list before it is emptied (it keeps every member of the shard)
MEMBERS_HELD = 4096
#: the largest caption or .json member read (each is read whole): a caption is kilobytes
MAX_MEMBER_BYTES = 64 << 20


def is_tar(path) -> bool:
    return str(path).lower().endswith(TAR_SUFFIXES)


def is_pattern(path) -> bool:
    """A brace pattern or glob of shards (which names no one file)."""
    return is_tar(path) and any(mark in str(path) for mark in "{*?[") and not Path(path).exists()


def find_shards(path, format: str = "auto") -> list[Path] | None:
    """The shards ``path`` names, or None when it is not a webdataset (``format`` 'auto').

    ``path``: a shard, a folder holding shards (other files beside them, such as img2dataset's
    ``.parquet`` and ``_stats.json``, are ignored), or an open_clip brace pattern
    (``shards/{00000..00099}.tar``, ``{a,b}.tar``) or glob of shards. This is the one place that
    turns a dataset argument into shard files."""
    text = str(path)
    path = Path(path)
    if format not in ("auto", "webdataset"):
        return None
    if path.is_file():
        shards = [path] if is_tar(path) or format == "webdataset" else None
    elif path.is_dir():
        # the name first: a folder of thousands of caption files is not stat-ed file by file
        shards = sorted(entry for entry in path.iterdir()
                        if not entry.name.startswith(".") and is_tar(entry.name) and entry.is_file()) or None
    elif is_pattern(text):
        shards = expand_source(text)
    else:
        shards = None
    if shards is None and format == "webdataset":
        raise DataError(f"{path}: expected webdataset shards (a {TAR_KINDS} file, a folder of them, "
                        "or a pattern such as shards/{00000..00099}.tar)")
    return shards


def read_webdataset(shards: Sequence[Path], columns, source: Path | None = None, *,
                    progress: bool | None = None, rows: int | None = None) -> RawCaptions:
    """The captions of the samples of ``shards`` (read in order), as :class:`RawCaptions`.

    ``columns``: a capgeo.captions.tabular.ColumnChoice (what the column options name). ``rows``:
    stop once that many captions are read (``--limit``): the rest of that shard and the later
    shards are not read, nor opened."""
    from capgeo.progress import BYTES, progress_bar

    reader = _Samples(columns)
    sizes = [_size(shard) for shard in shards]
    with progress_bar("Reading shards", total=sum(sizes), enabled=progress, unit=BYTES) as bar:
        for shard, size in zip(shards, sizes):
            if rows is not None and len(reader.texts) >= rows:
                break
            reader.read_shard(shard, stop=rows)
            bar.advance(size)
    return reader.captions(Path(source) if source is not None else Path(shards[0]))


def _size(shard: Path) -> int:
    try:
        return os.stat(shard).st_size
    except OSError as error:
        raise DataError(f"{shard}: cannot read: {error.strerror or error}") from None


class _Samples:
    """Captions gathered from sample after sample, shard after shard."""

    def __init__(self, columns):
        if columns.text and columns.captions:
            raise DataError("give --text-column or --captions-column, not both")
        self.columns = columns
        named = columns.text
        #: member extensions a caption is read from, in order; the .json keys tried when none is there
        self.caption_members = (named.lower(),) if named else CAPTION_MEMBERS
        self.caption_keys = (named,) if named else CAPTION_KEYS
        #: the .json key naming the image: given, or found in the first .json read (see _detect_group)
        self.group_key = columns.group
        self.detecting = columns.group is None
        #: whether every sample's .json is parsed (a column option names one of its keys)
        self.json_always = bool(columns.id or columns.group or columns.captions)
        self.texts: list = []
        self.ids: list = []
        self.groups: list = []
        self.places: list[tuple] = []  # (shard name, key, caption number or None): put in words on demand
        self.skipped: list[str] = []
        self.members: dict[str, None] = {}
        self.keys: dict[str, None] = {}
        #: each group's image member (capgeo.images.sources.MemberRef), by group or caption id
        self.images: dict = {}
        self._last_members = self._last_keys = None

    def read_shard(self, shard: Path, stop: int | None = None) -> None:
        """The shard's samples, until ``stop`` captions are gathered when given (then the rest of the
        shard is left unread, its end unchecked)."""
        import lzma
        import tarfile  # here, not at start-up
        import zlib

        name = shard.name
        key, members = None, {}
        try:
            with _open(shard) as (archive, stream_size):
                # a .json member of a plain tar is read only if its sample needs it (most have a .txt),
                # by seeking back to it; a gzip stream cannot seek back cheaply, so there it is read at once
                later = stream_size is not None
                read = lambda member: archive.extractfile(member).read()  # noqa: E731
                while True:
                    member = archive.next()
                    if member is None:
                        break
                    if len(archive.members) > MEMBERS_HELD:
                        archive.members.clear()  # its list of every member read: not needed here
                    if not member.isreg():
                        continue  # folders and links: webdataset leaves them out too
                    prefix, suffix = _split_name(member.name, shard)
                    if prefix is None:
                        continue
                    if prefix != key:
                        if key is not None:
                            self._add(key, members, name, shard, read)
                            if stop is not None and len(self.texts) >= stop:
                                return
                        key, members = prefix, {}
                    if suffix in members:
                        raise DataError(f"{shard}: sample {key}: two members named {member.name}")
                    if suffix == "json" or suffix in self.caption_members:
                        _check_size(member, stream_size, shard, key)
                    if suffix == "json":
                        members[suffix] = member if later else read(member)
                    elif suffix in self.caption_members:
                        members[suffix] = read(member)
                    elif suffix in IMAGE_MEMBERS:  # where the image is, for capgeo.images; not read here
                        members[suffix] = (member.name, member.offset_data if stream_size is not None else -1,
                                           member.size)
                    else:
                        members[suffix] = None  # another member: passed over, never read
                if key is not None:
                    self._add(key, members, name, shard, read)
                _check_ended(archive, stream_size, shard, key)
        except DataError:
            raise
        except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error, lzma.LZMAError) as error:
            if isinstance(error, OSError) and error.errno is not None:
                raise DataError(f"{shard}: cannot read: {error.strerror or error}") from None
            if key is None:
                raise DataError(f"{shard}: not a tar archive, or damaged at its start ({_reason(error)}); expected "
                                f"a webdataset shard ({TAR_KINDS})") from None
            raise DataError(f"{shard}: the tar is truncated or damaged in sample {key} ({_reason(error)}); "
                            "expected a complete webdataset shard") from None

    def _add(self, key: str, members: dict, shard_name: str, shard: Path, read) -> None:
        if members.keys() != self._last_members:
            self._last_members = members.keys()
            self.members.update(dict.fromkeys(members))
        columns = self.columns
        caption = None if columns.captions else self._member_caption(members, shard, key)
        needs_json = caption is None or self.json_always or (self.detecting and "json" in members)
        record = self._json(members, shard, key, read) if needs_json else {}
        if self.detecting and "json" in members:
            self._detect_group(record)
        if columns.captions:
            captions = record.get(columns.captions)
            if captions is not None and not isinstance(captions, list):
                raise DataError(f"{shard}: sample {key}: {columns.captions!r} should hold a list of captions; "
                                f"found {type(captions).__name__}")
            captions = [caption for caption in captions or () if caption is not None] or None
        else:
            if caption is None:
                caption = next((record[name] for name in self.caption_keys if record.get(name) is not None), None)
            captions = None if caption is None else [caption]
        if captions is None:
            self.skipped.append(f"{shard_name}, sample {key}")
            return
        ident = _text(record.get(columns.id)) if columns.id else key
        several = len(captions) > 1
        group = record.get(self.group_key) if self.group_key else key
        if not isinstance(group, (dict, list)):  # an object or a list is the loader's error, naming the sample
            group = _text(group)
        if group is None and several:
            group = key  # a sample without the image key is still one image, all its captions included
        image = next((members[suffix] for suffix in IMAGE_MEMBERS if members.get(suffix)), None)
        if image is not None:
            self._image(shard, image, [group, *(f"{ident}#{k}" if several else ident for k in range(len(captions)))])
        for k, caption in enumerate(captions):
            self.texts.append(caption)
            self.ids.append(f"{ident}#{k}" if several and ident is not None else ident)
            self.groups.append(group)
            self.places.append((shard_name, key, k + 1 if several else None))

    def _image(self, shard: Path, image: tuple, names: list) -> None:
        """The sample's image member, under each name its captions' group may take (the group, or
        the caption id where the shards name no group)."""
        from capgeo.images.sources import MemberRef

        ref = MemberRef(shard, *image)
        for name in names:
            if isinstance(name, str):  # (an object or a list as group is the loader's error)
                self.images.setdefault(name, ref)

    def _member_caption(self, members: dict, shard: Path, key: str) -> str | None:
        for suffix in self.caption_members:
            data = members.get(suffix)
            if data is not None:
                return _decoded(data, shard, key, suffix)
        return None

    def _json(self, members: dict, shard: Path, key: str, read) -> dict:
        data = members.get("json")
        if data is None:
            return {}
        if not isinstance(data, bytes):
            data = read(data)
        try:
            record = _json.loads(_decoded(data, shard, key, "json"))
        except ValueError as error:
            raise DataError(f"{shard}: sample {key}: {key}.json: invalid JSON: {error}") from None
        if not isinstance(record, dict):
            raise DataError(f"{shard}: sample {key}: {key}.json should hold an object; found {type(record).__name__}")
        if record.keys() != self._last_keys:
            self._last_keys = record.keys()
            self.keys.update(dict.fromkeys(record))
        return record

    def _detect_group(self, record: dict) -> None:
        """The first .json read decides the image key when none is named: webdataset's ShardWriter
        writes what it is given, and a caption set written one caption per sample carries its image
        as ``image_id``; reading each sample as its own image would count captions of one image
        as negatives of one another."""
        from capgeo.captions.tabular import GROUP_NAMES

        self.detecting = False
        # a name holding text or a number: an "image" object of sizes or EXIF names no image
        self.group_key = next((name for name in GROUP_NAMES if isinstance(record.get(name), (str, int))
                               and not isinstance(record.get(name), bool)), None)
        self.json_always = self.json_always or self.group_key is not None

    def captions(self, source: Path) -> RawCaptions:
        if not self.texts:
            self._nothing_found(source)
        self._check_keys_named(source)
        grouped = self.group_key is not None or self.columns.captions is not None
        return RawCaptions(
            source=source, format="webdataset", texts=self.texts, where=self._where, ids=self.ids,
            groups=self.groups if grouped else None,
            fields=[f".{suffix}" for suffix in self.members] + list(self.keys),
            skipped={_skip_reason(self.columns): self.skipped} if self.skipped else {},
            images=_shard_images(self.images))

    def _check_keys_named(self, source: Path) -> None:
        """A named id or group key that no sample holds is a typo, refused as a missing table column is
        (else every caption would silently become an image of its own)."""
        for option, name in (("--id-column", self.columns.id), ("--group-column", self.columns.group)):
            if name is not None and name not in self.keys:
                keys = ", ".join(list(self.keys)[:30]) or "none"
                raise DataError(f"{source}: no .json key {name!r} ({option}) in any sample; .json keys found: {keys}")

    def _where(self, row: int) -> str:
        shard_name, key, number = self.places[row]
        return f"{shard_name}, sample {key}" + (f", caption {number}" if number is not None else "")

    def _nothing_found(self, source: Path) -> None:
        members = ", ".join(f".{suffix}" for suffix in list(self.members)[:20]) or "none"
        keys = ", ".join(list(self.keys)[:20]) or "none"
        raise DataError(f"{source}: no sample has a caption ({_skip_reason(self.columns)[len('no '):]}); "
                        f"members found: {members}; .json keys found: {keys}; name the caption with "
                        "--text-column (a member extension or a .json key)")


def _shard_images(members: dict):
    from capgeo.images.sources import ShardImages

    return ShardImages(members) if members else None


def _skip_reason(columns) -> str:
    if columns.captions:
        return f"no captions: no {columns.captions!r} list in the sample's .json"
    if columns.text:
        return f"no caption: no .{columns.text.lower()} member and no {columns.text!r} key in the sample's .json"
    return "no caption: no .txt member and no 'caption' key in the sample's .json"


class _open:
    """The shard as a TarFile read forward (a .tar.gz through gzip, a .tar.zst through zstandard,
    a .tar.bz2 and a .tar.xz through bz2 and lzma), and the uncompressed shard's file size (None for
    a compressed one, whose size is known only once it is read)."""

    def __init__(self, shard: Path):
        self.shard = shard
        self.handles = []

    def __enter__(self):
        import bz2
        import gzip
        import lzma
        import tarfile

        raw = open(self.shard, "rb")
        self.handles.append(raw)
        size = os.fstat(raw.fileno()).st_size
        fileobj = raw
        kind = sniff(raw.read(6))   # by content, as other compressed files are
        raw.seek(0)
        opener = {"gzip": lambda: gzip.GzipFile(fileobj=raw, mode="rb"), "bzip2": lambda: bz2.BZ2File(raw),
                  "xz": lambda: lzma.LZMAFile(raw)}.get(kind)
        if opener is not None:
            fileobj, size = _LastBlock(opener()), None
            self.handles.append(fileobj)
        elif kind == "zstd":
            fileobj, size = _LastBlock(_ZstdStream(self.shard)), None
            self.handles.append(fileobj)
        archive = tarfile.open(fileobj=fileobj, mode="r:")
        self.handles.append(archive)
        return archive, size

    def __exit__(self, *exc):
        for handle in reversed(self.handles):
            handle.close()
        return False


class _ZstdStream:
    """A .tar.zst shard read forward as the tar it holds (tarfile reads forward, and seeks forward
    over the members it passes); input that ends inside a zstd frame is an EOFError, as a cut gzip
    stream's is (zstandard's own stream reader ends quietly there). Needs the zstandard package."""

    def __init__(self, shard: Path):
        from capgeo.captions.compressed import _zstd_chunks

        self.chunks = _zstd_chunks(shard)
        self.buffer = bytearray()
        self.position = 0

    def read(self, size: int = -1) -> bytes:
        try:
            while size is None or size < 0 or len(self.buffer) < size:
                chunk = next(self.chunks, None)
                if chunk is None:
                    break
                self.buffer += chunk
        except EOFError:
            raise EOFError("the zstd stream ends early") from None
        count = len(self.buffer) if size is None or size < 0 else min(size, len(self.buffer))
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        self.position += count
        return data

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        target = offset if whence == os.SEEK_SET else self.position + offset
        if whence not in (os.SEEK_SET, os.SEEK_CUR) or target < self.position:
            raise ValueError("a zstd stream is read forward only")
        while self.position < target and self.read(min(target - self.position, 1 << 20)):
            pass
        return self.position

    def close(self) -> None:
        self.chunks.close()


class _LastBlock:
    """A gzip stream that keeps the last block read from it: after tarfile stops at a block that
    is not a member header, that block is looked at again without seeking back (which would
    decompress the shard again from its start)."""

    def __init__(self, stream):
        self.stream = stream
        self.last_at, self.last = 0, b""

    def read(self, size=-1):
        at = self.stream.tell()
        data = self.stream.read(size)
        if len(data) <= BLOCK:
            self.last_at, self.last = at, data
        return data

    def since(self, offset: int) -> bytes:
        """What was last read from ``offset`` on, when that was the last block read."""
        start = offset - self.last_at
        return self.last[start:] if 0 <= start <= len(self.last) else b""

    def __getattr__(self, name):
        return getattr(self.stream, name)


_KEY_AND_EXTENSION = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext


def _split_name(name: str, shard: Path) -> tuple[str | None, str]:
    """(key, extension) of a member name as webdataset splits it, refusing names that leave the archive."""
    if name[:1] in ("/", "\\") or (".." in name and ".." in PurePosixPath(name).parts) or \
            (":" in name and re.match(r"^[A-Za-z]:[\\/]", name)):
        raise DataError(f"{shard}: member {name!r} has a name that escapes the archive (absolute or with '..'); "
                        "a webdataset shard's members are plain relative names (key.ext); capgeo extracts "
                        "nothing, but will not read a shard built this way")
    found = _KEY_AND_EXTENSION.match(name)
    if found is None or name.rpartition("/")[2].startswith("__"):
        return None, ""  # names without an extension, and webdataset's metadata members (__key__ ...)
    return found.group(1), found.group(2).lower()


def _check_ended(archive: tarfile.TarFile, stream_size: int | None, shard: Path, key: str | None) -> None:
    """tarfile ends quietly both where a shard stops exactly between two members and at a block
    that is not a member header; a complete archive ends with blocks of zeros after its last
    member, so anything else there is a shard cut short or damaged."""
    if archive.offset == 0:
        return  # an empty archive: tarfile has refused what is not one
    fileobj = archive.fileobj
    if stream_size is None:
        # a gzip stream seeks backwards by decompressing from the start: go on from where tarfile
        # stopped reading, with the block it stopped at
        tail = [fileobj.since(archive.offset)]
    else:
        fileobj.seek(archive.offset)
        tail = []
    trailing, damaged = 0, False
    for chunk in tail + list(iter(lambda: fileobj.read(1 << 16), b"")):
        trailing += len(chunk)
        damaged = damaged or chunk.count(0) != len(chunk)
        if damaged:
            break
    at = f"after sample {key}" if key is not None else "at its start"
    if damaged:
        raise DataError(f"{shard}: the tar is truncated or damaged {at} (the block at byte {archive.offset:,} of the tar is "
                        "neither a member header nor the end of the archive); expected a complete webdataset shard")
    if trailing < BLOCK:
        raise DataError(f"{shard}: the tar is truncated {at} (it stops without the end-of-archive blocks); "
                        "expected a complete webdataset shard")


def _check_size(member: tarfile.TarInfo, stream_size: int | None, shard: Path, key: str) -> None:
    """A caption or .json member is read whole, so the size its header declares is checked first: a
    forged header or a sparse member declaring a terabyte would otherwise be allocated in full."""
    if member.size > MAX_MEMBER_BYTES:
        sparse = " (a sparse member)" if member.issparse() else ""
        raise DataError(f"{shard}: sample {key}: {member.name} declares {member.size:,} bytes{sparse}, more than the "
                        f"{MAX_MEMBER_BYTES >> 20} MiB a caption or .json member may hold; expected a webdataset shard "
                        "whose text members are captions and metadata")
    if stream_size is not None and not member.issparse() and member.offset_data + member.size > stream_size:
        raise DataError(f"{shard}: the tar is truncated or damaged in sample {key} ({member.name} declares "
                        f"{member.size:,} bytes, past the end of the {stream_size:,}-byte file); expected a complete "
                        "webdataset shard")


def _decoded(data: bytes, shard: Path, key: str, suffix: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{shard}: sample {key}: {key}.{suffix} is not UTF-8 (byte 0x{data[error.start]:02x} at "
                        f"offset {error.start}); re-encode it as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def _text(value):
    return value if value is None or isinstance(value, str) else str(value)


def _reason(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
