"""The workspace file: SQLite, its schema, and the rows calls write."""

from __future__ import annotations

from .sqlite import BUSY_TIMEOUT_MS, Clock, Store, Tx, default_path, workspace_path

__all__ = ["BUSY_TIMEOUT_MS", "Clock", "Store", "Tx", "default_path", "workspace_path"]
