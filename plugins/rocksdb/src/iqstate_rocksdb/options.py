"""RocksDB tuning with sane defaults, overridable per store through `config={...}`.

app.key_value_store("counts", 4, engine="rocksdb",
                    config={"block_cache_mb": 256, "compression": "zstd"})
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, WriteOptions

_COMPRESSIONS = {
    "none": DBCompressionType.none,
    "snappy": DBCompressionType.snappy,
    "lz4": DBCompressionType.lz4,
    "zstd": DBCompressionType.zstd,
    "zlib": DBCompressionType.zlib,
}
_caches: dict[int, Cache] = {}
_caches_lock = threading.Lock()


def shared_cache(megabytes: int) -> Cache:
    """One block cache per size for the process, shared by every partition that asks for it."""
    with _caches_lock:
        cache = _caches.get(megabytes)
        if cache is None:
            cache = _caches[megabytes] = Cache(megabytes * 1024 * 1024)
        return cache


@dataclass(frozen=True)
class RocksDBSettings:
    """Per-store RocksDB options (the defaults suit point lookups and short ranges)."""

    block_cache_mb: int = 64
    bloom_bits_per_key: int = 10
    compression: str = "lz4"
    write_buffer_mb: int = 16
    max_open_files: int = 256
    sync_commits: bool = False
    """fsync the WAL at every commit: survives power loss, not only process crashes."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, store: str) -> RocksDBSettings:
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise ValueError(
                f"store {store!r}: unknown rocksdb option(s) {unknown}; known: {sorted(known)}"
            )
        settings = cls(**dict(config))
        for name in ("block_cache_mb", "write_buffer_mb", "max_open_files"):
            value = getattr(settings, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"store {store!r}: rocksdb option {name} must be an int >= 1")
        if not isinstance(settings.bloom_bits_per_key, int) or settings.bloom_bits_per_key < 0:
            raise ValueError(f"store {store!r}: bloom_bits_per_key must be an int >= 0")
        if settings.compression not in _COMPRESSIONS:
            raise ValueError(
                f"store {store!r}: compression must be one of {sorted(_COMPRESSIONS)}, "
                f"got {settings.compression!r}"
            )
        return settings

    def db_options(self) -> Options:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        table = BlockBasedOptions()
        table.set_block_cache(shared_cache(self.block_cache_mb))
        if self.bloom_bits_per_key:
            table.set_bloom_filter(self.bloom_bits_per_key, False)
        table.set_cache_index_and_filter_blocks(True)
        options.set_block_based_table_factory(table)
        options.set_compression_type(_COMPRESSIONS[self.compression]())
        options.set_write_buffer_size(self.write_buffer_mb * 1024 * 1024)
        options.set_max_open_files(self.max_open_files)
        return options

    def offsets_options(self) -> Options:
        options = Options(raw_mode=True)
        options.set_write_buffer_size(1024 * 1024)
        return options

    def write_options(self) -> WriteOptions:
        options = WriteOptions()
        options.sync = self.sync_commits
        return options
