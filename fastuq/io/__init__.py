"""Corpus input and output: readers (files, folders, frames), the canonical schema and its
checks, packing into padded arrays, and safe (atomic) writers."""

from fastuq._lazy import submodule_getattr

__getattr__ = submodule_getattr(__name__)  # its modules load on first access
