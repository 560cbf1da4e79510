"""Corpus input and output: readers (files, folders, frames), the canonical schema and its
checks, packing into padded arrays, and safe (atomic) writers."""
