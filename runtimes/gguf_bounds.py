"""The ``gguf`` package's reader, bounded: no count or length in a header is trusted beyond the
bytes that remain in the file, and what a header may make us hold in memory is capped.

``gguf.GGUFReader`` believes a file's counts: an array of 2^40 elements near the end of a
566-byte file makes it loop for ever (each read past the end is empty, so the offset never
moves) while its lists grow by about 100 MB/s. :class:`BoundedReader` keeps the reader's data
model (fields, parts, tensors: what :class:`runtimes.gguf_file.GgufFile` and the ``gguf`` tools
read) and checks, before it allocates or loops, that

- every read lies inside the file, and every count times the smallest size of one element fits
  in the bytes that remain (so a loop cannot outrun the file);
- llama.cpp's own limits hold (``ggml/src/gguf.cpp``: no nested arrays, at most 2^30 array
  elements and 1 GiB per string, tensor names under 64 bytes, at most 4 dimensions, element
  counts below 2^63): a file llama.cpp refuses is refused here too, with the same reason;
- our caps on what becomes Python objects hold (:data:`LIMITS`: key/value pairs, tensors, strings
  inside arrays), because each of those costs a few hundred bytes of memory however few bytes it
  takes in the file.

Numeric arrays are read as one array view each instead of one object per element (the package's
own loop), which is what makes a per-token array of a 262k-token vocabulary cheap.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType

GIB = 1 << 30


@dataclass(frozen=True)
class GgufLimits:
    """What a GGUF header may make us load. llama.cpp's own limits first, then ours."""

    max_dims: int = 4  # GGML_MAX_DIMS
    max_tensor_name: int = 63  # GGML_MAX_NAME is 64, with the terminating NUL
    max_array_elements: int = GIB  # GGUF_MAX_ARRAY_ELEMENTS
    max_string_bytes: int = GIB  # GGUF_MAX_STRING_LENGTH
    # ours: each of these becomes Python objects (a few hundred bytes apiece); real models stay
    # far below (tens of keys, a few thousand tensors, a 262k vocabulary plus its merges)
    max_kv_pairs: int = 1 << 16
    max_tensors: int = 1 << 16
    max_strings: int = 1 << 20  # strings inside metadata arrays, all arrays together


LIMITS = GgufLimits()

# The fewest bytes one item can take in a file: a count beyond remaining // this is a lie.
MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, one key byte, value type, a one-byte value
# name length, one name byte, dimension count, one dimension, type, data offset
MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 8 + 4 + 8
STRING_HEAD_BYTES = 8
KNOWN_TYPES = frozenset(int(t) for t in GGUFValueType)


INLINE_TEXT = 64  # strings up to this many bytes are copied (cheaper than a view)


class _Text(bytes):
    """A short string's bytes, where the package keeps an array view (``tobytes`` is all that
    ``ReaderField.contents`` asks of it)."""

    __slots__ = ()

    def tobytes(self) -> bytes:
        return bytes(self)


class GgufFormatError(ValueError):
    """A header that contradicts its own file or exceeds a limit; the message says which."""


def _scalar_size(value_type: int) -> int | None:
    """Bytes of one scalar of ``value_type`` (None: not a fixed-size scalar)."""
    nptype = GGUFReader.gguf_scalar_to_np.get(GGUFValueType(value_type))
    return None if nptype is None else int(np.dtype(nptype).itemsize)


class BoundedReader(GGUFReader):
    """``gguf.GGUFReader`` with every count checked against the file and :data:`LIMITS`."""

    def __init__(self, path: os.PathLike[str] | str, limits: GgufLimits = LIMITS) -> None:
        self.limits = limits
        self.strings_read = 0
        self._plain: np.ndarray[Any, Any] | None = None
        super().__init__(path, "r")

    # every read ----------------------------------------------------------------------------
    def _remaining(self, offset: int) -> int:
        return int(self.data.size) - offset

    def _get(
        self, offset: int, dtype: Any, count: int = 1, override_order: Any = None
    ) -> np.ndarray[Any, Any]:
        count = int(count)
        need = int(np.dtype(dtype).itemsize) * count
        if offset < 0 or count < 0 or need > self._remaining(offset):
            raise GgufFormatError(
                f"at byte {offset}: the header asks for {count} value(s) of {need} bytes in all; "
                f"only {max(self._remaining(offset), 0)} bytes remain (truncated or damaged file)"
            )
        if self._plain is None:  # slices of a plain view: a memmap's cost 5x more per read
            self._plain = self.data.view(np.ndarray)
        arr = self._plain[offset : offset + need].view(dtype=dtype)[:count]
        order = self.byte_order if override_order is None else override_order
        return arr.view(arr.dtype.newbyteorder(order))

    def _fits(self, offset: int, count: int, each: int, what: str) -> None:
        """``count`` items of at least ``each`` bytes must fit in what remains."""
        if count * each > self._remaining(offset):
            raise GgufFormatError(
                f"at byte {offset}: the header announces {count} {what}, which need at least "
                f"{count * each} bytes; only {self._remaining(offset)} remain (damaged file)"
            )

    def _cap(self, count: int, cap: int, what: str, whose: str) -> None:
        if count > cap:
            raise GgufFormatError(f"{count} {what}: more than {whose} limit of {cap}")

    # metadata -------------------------------------------------------------------------------
    def _build_fields(self, offs: int, count: int) -> int:
        count = int(count)
        self._cap(count, self.limits.max_kv_pairs, "metadata key/value pairs", "snapbuild's")
        self._fits(offs, count, MIN_KV_BYTES, "metadata key/value pairs")
        return super()._build_fields(offs, count)

    def _get_str(self, offset: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        length = int(self._get(offset, np.uint64)[0])
        self._cap(length, self.limits.max_string_bytes, "bytes in a string", "llama.cpp's")
        return super()._get_str(offset)

    def _get_field_parts(
        self, orig_offs: int, raw_type: int
    ) -> tuple[int, list[np.ndarray[Any, Any]], list[int], list[GGUFValueType]]:
        if int(raw_type) not in KNOWN_TYPES:
            raise GgufFormatError(f"at byte {orig_offs}: unknown value type {int(raw_type)}")
        if GGUFValueType(raw_type) != GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        item_type = int(self._get(orig_offs, np.uint32)[0])
        count = int(self._get(orig_offs + 4, np.uint64)[0])
        start = orig_offs + 12
        if item_type == GGUFValueType.ARRAY or item_type not in KNOWN_TYPES:
            what = "arrays" if item_type == GGUFValueType.ARRAY else f"unknown type {item_type}"
            raise GgufFormatError(f"at byte {orig_offs}: an array of {what} (llama.cpp refuses it)")
        self._cap(count, self.limits.max_array_elements, "array elements", "llama.cpp's")
        size = _scalar_size(item_type)
        self._fits(start, count, size or STRING_HEAD_BYTES, "array elements")
        if size is None:
            self.strings_read += count
            self._cap(self.strings_read, self.limits.max_strings, "strings", "snapbuild's")
            return self._string_array(orig_offs, count)
        nptype = self.gguf_scalar_to_np[GGUFValueType(item_type)]
        head = [self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)]
        values = self._get(start, nptype, count)  # one view for the whole array
        types = [GGUFValueType.ARRAY, GGUFValueType(item_type)]
        return 12 + int(values.nbytes), [*head, values], [2], types

    def _string_array(
        self, orig_offs: int, count: int
    ) -> tuple[int, list[Any], list[int], list[GGUFValueType]]:
        """An array of strings in one tight loop (a 262k-token vocabulary is that many), held
        compactly: all lengths in one array, short strings as bytes (a view costs ~100 bytes
        more each), long ones as views of the file. ``contents()`` reads them as before."""
        head = [self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)]
        plain = self._plain
        assert plain is not None  # set by the reads above
        unpack = struct.Struct("<Q" if self.byte_order == "I" else ">Q").unpack_from
        buffer, offs, end = plain.data, orig_offs + 12, int(plain.size)
        lengths: list[int] = []
        texts: list[Any] = []
        for _ in range(count):
            if end - offs < STRING_HEAD_BYTES:
                self._get(offs, np.uint64)  # raises: the length itself is cut off
            length = int(unpack(buffer, offs)[0])
            self._cap(length, self.limits.max_string_bytes, "bytes in a string", "llama.cpp's")
            offs += STRING_HEAD_BYTES
            if length > end - offs:
                self._get(offs, np.uint8, length)  # raises, saying where
            piece = plain[offs : offs + length]
            texts.append(_Text(piece) if length <= INLINE_TEXT else piece)
            lengths.append(length)
            offs += length
        parts = [*head, np.array(lengths, dtype=np.uint64), *texts]
        types = [GGUFValueType.ARRAY] + ([GGUFValueType.STRING] if count else [])
        return offs - orig_offs, parts, list(range(3, 3 + count)), types

    # tensors --------------------------------------------------------------------------------
    def _build_tensor_info(self, offs: int, count: int) -> tuple[int, list[Any]]:
        count = int(count)
        self._cap(count, self.limits.max_tensors, "tensors", "snapbuild's")
        self._fits(offs, count, MIN_TENSOR_INFO_BYTES, "tensors")
        return super()._build_tensor_info(offs, count)

    def _get_tensor_info_field(self, orig_offs: int) -> Any:
        name_len = int(self._get(orig_offs, np.uint64)[0])
        self._cap(name_len, self.limits.max_tensor_name, "bytes in a tensor name", "llama.cpp's")
        n_dims = int(self._get(orig_offs + 8 + name_len, np.uint32)[0])
        self._cap(n_dims, self.limits.max_dims, "tensor dimensions", "llama.cpp's")
        field = super()._get_tensor_info_field(orig_offs)
        elements = 1
        for dim in field.parts[3].tolist():
            elements *= int(dim)
        if elements >= 1 << 63:
            raise GgufFormatError(f"tensor {field.name!r} has {elements} elements (>= 2^63)")
        return field
