"""RocksDB tuning with measured defaults, overridable per store through `config={...}`.

app.key_value_store("counts", 4, engine="rocksdb",
                    config={"block_cache_mb": 256, "compression": "zstd"})

The defaults were chosen with `bench/rocksdb_options.py` (RocksDB's own block cache
statistics per get; figures in docs/engines.md). Index and filter blocks are held by the
open table readers, outside the block cache: a whole-table bloom filter is about 1.2 MB
per million keys, larger than a shard of the cache (rocksdict's LRU cache has 64 shards,
so 1 MB each at 64 MB), and a block larger than its shard is never kept, so every get
read and checked it again (130-210 us instead of 5-7). A store that wants index and
filters bounded by the cache gets them partitioned into small blocks instead.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    DBRecoveryMode,
    Options,
    WriteOptions,
)

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
    """One block cache per size for the process, shared by every partition that asks for it.

    A HyperClockCache: in `bench/rocksdb_options.py` it kept more of the data than the LRU
    cache of the same size and its lookups cost less (5.1-5.2 us against 6.1-6.4 us per get
    at 5M keys in 256 MB, 4.2-4.3 us against 4.5-4.6 us with every block cached). Its
    entry charge is left to RocksDB (0: the table grows with the entries), because a fixed
    estimate allocates the table up front: 33 MB of resident memory per GiB of capacity.
    """
    with _caches_lock:
        cache = _caches.get(megabytes)
        if cache is None:
            cache = Cache.new_hyper_clock_cache(megabytes * 1024 * 1024, 0)
            _caches[megabytes] = cache
        return cache


@dataclass(frozen=True)
class RocksDBSettings:
    """Per-store RocksDB options (the defaults suit point lookups and short ranges)."""

    block_cache_mb: int = 1024
    """Block cache for data blocks: one per size for the process, shared by every store and
    partition asking for that size (an aggregate ceiling, filled only as blocks are read)."""
    cache_index_and_filter_blocks: bool = False
    """`False`: index and filters are held by the open table readers (about 1.7 bytes per
    key outside the cache, never reread). `True`: they live in the block cache, bounded by
    it, partitioned into small blocks (the top level pinned) so that each fits a shard."""
    bloom_bits_per_key: int = 10
    compression: str = "lz4"
    write_buffer_mb: int = 16
    max_open_files: int = 256
    sync_commits: bool | None = None
    """fsync the WAL at every commit, so a commit survives power loss and not only a crash
    of the process. `None` follows the runtime (`StateStoreContext.sync_commits`: on under
    exactly-once for a store without a changelog)."""

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
                raise ValueError(
                    f"store {store!r}: rocksdb option {name} must be an int >= 1, got {value!r}"
                )
        if not isinstance(settings.cache_index_and_filter_blocks, bool):
            raise ValueError(
                f"store {store!r}: rocksdb option cache_index_and_filter_blocks must be true or "
                f"false, got {settings.cache_index_and_filter_blocks!r}"
            )
        bloom = settings.bloom_bits_per_key
        if isinstance(bloom, bool) or not isinstance(bloom, int) or bloom < 0:
            raise ValueError(
                f"store {store!r}: rocksdb option bloom_bits_per_key must be an int >= 0, "
                f"got {bloom!r}"
            )
        if settings.compression not in _COMPRESSIONS:
            raise ValueError(
                f"store {store!r}: rocksdb option compression must be one of "
                f"{sorted(_COMPRESSIONS)}, "
                f"got {settings.compression!r}"
            )
        if settings.sync_commits is not None and not isinstance(settings.sync_commits, bool):
            raise ValueError(
                f"store {store!r}: rocksdb option sync_commits must be true, false or None, "
                f"got {settings.sync_commits!r}"
            )
        return settings

    def syncs(self, runtime_default: bool) -> bool:
        """Whether commits are fsynced: this store's option, else the runtime's choice."""
        return runtime_default if self.sync_commits is None else self.sync_commits

    def db_options(self, *, create: bool) -> Options:
        """Options for the data column family and the database; `create` only for a new one.

        An existing database is never created anew: a database whose CURRENT file vanished
        must fail to open, not reopen empty. The WAL is replayed up to a torn last record
        (a crash while writing it) but damage before the end fails the open instead of
        silently dropping every later commit, and all column families flush together, so
        the table files alone always hold data and offsets of one commit.
        """
        options = Options(raw_mode=True)
        options.create_if_missing(create)
        options.create_missing_column_families(create)
        options.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
        options.set_atomic_flush(True)
        options.set_keep_log_file_num(10)  # RocksDB's info LOG rotates at every open
        table = BlockBasedOptions()
        table.set_block_cache(shared_cache(self.block_cache_mb))
        if self.bloom_bits_per_key:
            table.set_bloom_filter(self.bloom_bits_per_key, False)
        if self.cache_index_and_filter_blocks:
            table.set_cache_index_and_filter_blocks(True)
            table.set_index_type(BlockBasedIndexType.two_level_index_search())
            table.set_partition_filters(True)
            table.set_pin_top_level_index_and_filter(True)
            table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        options.set_block_based_table_factory(table)
        options.set_compression_type(_COMPRESSIONS[self.compression]())
        options.set_write_buffer_size(self.write_buffer_mb * 1024 * 1024)
        options.set_max_open_files(self.max_open_files)
        return options

    def offsets_options(self) -> Options:
        options = Options(raw_mode=True)
        options.set_write_buffer_size(1024 * 1024)
        return options


def write_options(sync: bool) -> WriteOptions:
    """Write options of every commit: through the WAL, fsynced iff `sync`."""
    options = WriteOptions()
    options.sync = sync
    return options


def check_config(config: Mapping[str, Any], store: str) -> None:
    """Refuse an unknown or invalid option when a store is declared (`Engine.check_config`)."""
    RocksDBSettings.from_config(config, store=store)
