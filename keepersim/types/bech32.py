"""Bech32 addresses (BIP-173) and Cosmos module account addresses.

A module account's address is the first 20 bytes of sha256(module name), as Cosmos SDK's
``authtypes.NewModuleAddress`` derives it, bech32-encoded with the chain's account prefix. The
governance authority is the ``gov`` module's account: derived, never a parameter.
"""

from __future__ import annotations

import hashlib
from typing import Final

CHARSET: Final = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GENERATOR: Final = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
#: The chain's account address prefix (Gonka: "gonka").
ACCOUNT_ADDRESS_PREFIX: Final = "gonka"
GOV_MODULE_NAME: Final = "gov"


def _compute_polymod(values: list[int]) -> int:
    check = 1
    for value in values:
        top = check >> 25
        check = (check & 0x1FFFFFF) << 5 ^ value
        for i, generator in enumerate(_GENERATOR):
            if (top >> i) & 1:
                check ^= generator
    return check


def _expand_hrp(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def compute_5bit_groups(data: bytes) -> list[int]:
    """``data`` regrouped from 8-bit bytes into 5-bit values, the last one zero-padded."""
    acc = bits = 0
    out = []
    for byte in data:
        acc = (acc << 8) | byte
        bits += 8
        while bits >= 5:
            bits -= 5
            out.append((acc >> bits) & 31)
    if bits:
        out.append((acc << (5 - bits)) & 31)
    return out


def compute_bech32(hrp: str, data: bytes) -> str:
    """The bech32 string of ``data`` under the human-readable part ``hrp`` (lower case)."""
    if not hrp or hrp != hrp.lower() or any(not 33 <= ord(c) <= 126 for c in hrp):
        raise ValueError(f"bech32 prefix {hrp!r}: expected lower-case printable ASCII")
    values = compute_5bit_groups(data)
    polymod = _compute_polymod([*_expand_hrp(hrp), *values, 0, 0, 0, 0, 0, 0]) ^ 1
    checksum = [(polymod >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(CHARSET[v] for v in values + checksum)


def is_valid_bech32(address: str) -> bool:
    """True iff ``address`` is a well-formed lower-case bech32 string with a valid checksum."""
    hrp, sep, data = address.rpartition("1")
    if not sep or not hrp or len(data) < 6 or any(c not in CHARSET for c in data):
        return False
    return _compute_polymod([*_expand_hrp(hrp), *(CHARSET.index(c) for c in data)]) == 1


def compute_module_address(module: str, prefix: str = ACCOUNT_ADDRESS_PREFIX) -> str:
    """A Cosmos module account's address (``authtypes.NewModuleAddress(module)``)."""
    return compute_bech32(prefix, hashlib.sha256(module.encode()).digest()[:20])


#: The governance authority: the x/gov module account of the chain's address prefix.
GOV_AUTHORITY: Final = compute_module_address(GOV_MODULE_NAME)
