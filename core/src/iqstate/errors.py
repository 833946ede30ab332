"""Exceptions raised by iqstate.

Everything that can go wrong for one partition of a query is a failed `QueryResult`,
never an exception; these classes are for the rest: using the API wrongly, or asking
an application that cannot answer at all.
"""

from __future__ import annotations


class IqstateError(Exception):
    """Base class of every iqstate exception."""


class InvalidStateStoreError(IqstateError):
    """A store cannot be queried now (IQv1 facades, and the three IQv2 cases below)."""


class UnknownStateStoreError(InvalidStateStoreError):
    """The application declares no store with this name."""


class StreamsNotStartedError(InvalidStateStoreError):
    """The application has not been started yet; retry after `start()`."""


class StreamsStoppedError(InvalidStateStoreError):
    """The application has been closed or has failed; it can no longer serve queries."""


class InvalidStateStorePartitionError(InvalidStateStoreError):
    """The partition asked of an IQv1 store does not exist or is not hosted here."""


class UnsupportedOperationError(IqstateError):
    """The operation is not allowed through this handle (e.g. `commit` from pipeline code)."""


class IllegalQueryResultAccess(IqstateError, ValueError):
    """A result was read from a failed query, or a failure from a successful one."""


class SerializationError(IqstateError, ValueError):
    """A serde could not encode or decode a key or value."""


class PluginError(IqstateError):
    """A plugin registered something inconsistent, or something asked of plugins is missing."""


class UnknownEngineError(PluginError):
    """A store names an engine that no installed plugin provides."""


class ClosedStoreError(InvalidStateStoreError):
    """The store was used after `close()` or before `init()`."""


class CorruptStateError(IqstateError):
    """A state file or directory could not be read; the message names it and what is wrong."""


class StateStorageError(IqstateError, OSError):
    """A store's files could not be written (or opened) for a reason of the machine, not of
    the files: a full disk, a used-up quota, a read-only file system, missing permissions.
    The store keeps its last commit, so nothing committed is lost: fix the cause and start
    again, without moving the directory away (that is for `CorruptStateError`)."""


class IncompatibleStateError(IqstateError):
    """The state directory holds a store declared differently (partitions, engine, type)."""


class StateDirectoryLockedError(IqstateError):
    """Another process holds the application's state directory."""


class LostStateError(IqstateError):
    """A store partition's committed state is missing or cannot be trusted, and nothing can
    rebuild it; the message names the partition, its directory and what to do."""


class BatchGapError(IqstateError):
    """A batch id lies more than one past a partition's fence: batches in between are
    missing there (a rolled-back or replaced partition). Nothing of the batch was written."""
