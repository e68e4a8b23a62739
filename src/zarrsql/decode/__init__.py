"""Decoding of stored bytes and numbers into SQL values (chunks, sentinels, CF times)."""
