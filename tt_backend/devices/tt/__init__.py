"""Tenstorrent: the ttnn mesh (open, submeshes, close in order) and tt-metal's paged KV layout."""
