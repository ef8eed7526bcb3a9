"""Protocol Buffers' wire format, walked field by field without a generated class or the `protobuf` package:
the few messages the package reads (an ONNX ModelProto's top level, a TensorFlow checkpoint's bundle entries)
are read by their field numbers. A malformed message raises ValueError, which each reader turns into its own
error naming the file.
"""

from collections.abc import Iterator
from typing import Union

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5  # the wire types a proto3 message uses


def varint(data: memoryview, pos: int) -> tuple[int, int]:
    """(the varint at `pos`, the position after it); at most 64 bits (a negative int64 reads as its
    two's complement, 2**64 + value)."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a varint runs past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(data: memoryview) -> Iterator[tuple[int, int, int, int, memoryview]]:
    """(field number, wire type, start, end, payload of a length-delimited field) of each field of one message."""
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = varint(data, pos)
        wire_type = tag & 7
        payload = data[pos:pos]
        if wire_type == VARINT:
            _, pos = varint(data, pos)
        elif wire_type == FIXED64:
            pos += 8
        elif wire_type == LENGTH_DELIMITED:
            size, pos = varint(data, pos)
            payload = data[pos : pos + size]
            pos += size
        elif wire_type == FIXED32:
            pos += 4
        else:
            raise ValueError(f"wire type {wire_type} at byte {start}")
        if pos > len(data):
            raise ValueError(f"field {tag >> 3} at byte {start} runs past the end")
        yield tag >> 3, wire_type, start, pos, payload


def field_values(data: memoryview) -> Iterator[tuple[int, Union[int, memoryview]]]:
    """(field number, value) of each field: an int for a varint or fixed-size field (little-endian, unsigned),
    the bytes of a length-delimited one (a string, bytes, a nested message or a packed repeated field)."""
    for number, wire_type, start, end, payload in fields(data):
        if wire_type == LENGTH_DELIMITED:
            yield number, payload
        elif wire_type == VARINT:
            _, after_tag = varint(data, start)
            yield number, varint(data, after_tag)[0]
        else:  # fixed32 / fixed64: the last 4 or 8 bytes of the field
            width = 4 if wire_type == FIXED32 else 8
            yield number, int.from_bytes(data[end - width : end], "little")


def signed64(value: int) -> int:
    """An int64 field's value from its varint (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value
