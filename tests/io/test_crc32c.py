"""CRC-32C as numpy computes it equals the bit-by-bit definition at every length, and the standard check value."""

import numpy

from spacy_elmo.io.crc32c import crc32c, masked_crc32c


def bitwise_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def test_crc32c_is_castagnolis_at_every_length() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert masked_crc32c(b"") == 0xA282EAD8  # the mask of CRC 0
    data = numpy.random.default_rng(0).integers(0, 256, 9000, dtype=numpy.uint8).tobytes()
    for n in (0, 1, 31, 2047, 2048, 2049, 4096 + 13, 9000):  # below and past the vectorised threshold
        assert crc32c(data[:n]) == bitwise_crc32c(data[:n]), n
