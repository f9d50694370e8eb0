"""The integers and the host a launcher (torchrun, Slurm) puts in a process's environment, read by
the one number grammar (harness.core.numbers) within each variable's range: a launcher's typo is
one line naming the variable (exit 2), not a traceback from inside torch.distributed, and '٣',
'+1', ' 1' or '01' is no rank."""
from __future__ import annotations

import ipaddress
import re
from typing import Mapping, Optional

from harness.core.echo import shown
from harness.core.numbers import NumberError, parse_int
from harness.core.options import UsageError


def env_int(env: Mapping[str, str], name: str, low: int, high: int, default: Optional[int] = None) -> int:
    """The integer the launcher put in ``name``, in [low, high]; ``default`` where it is unset, or
    UsageError naming the variable and what it must hold."""
    text = env.get(name)
    if text is None:
        if default is None:
            raise UsageError(f"{name} is not set; the launcher (torchrun, Slurm) sets it")
        return default
    try:
        return parse_int(text, name, low, high)
    except NumberError:
        raise UsageError(f"{name}={shown(text)}: expected an integer in [{low}, {high}]") from None


# A host name as RFC 1123 spells one: dot-separated labels of letters, digits and inner hyphens,
# at most 253 characters, its last label not all digits (``999.999.999.999`` is no address and no
# name). torch's env:// resolves MASTER_ADDR itself and waits out its timeout on a name it cannot
# reach, so a value that is no host at all ("-oProxy") is refused up front.
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
MAX_HOST_CHARS = 253
# An IPv6 zone (``fe80::1%eth0``): ipaddress takes any text after "%", so it is held to an
# interface name's characters and length (Linux's IFNAMSIZ - 1) or a zone index. Linux refuses
# "." and ".." as interface names, and a leading "-" would read as an option to a tool given it.
_ZONE = re.compile(r"(?!\.{1,2}\Z)[A-Za-z0-9_.][A-Za-z0-9_.-]{0,14}", re.ASCII)
# The numeric forms inet_aton also reads as an IPv4 address (``0x7f000001``, ``0177.1``, ``127.1``):
# a name spelled wholly so is ambiguous between a host name and an address, so it is neither.
_INET_ATON_PART = re.compile(r"0[xX][0-9A-Fa-f]*|[0-9]+", re.ASCII)


def _is_address(text: str) -> bool:
    """An IPv4 address, or an IPv6 one (in brackets or not) whose zone, if any, names an
    interface; a zone belongs to IPv6 only (``127.0.0.1%0`` is no address)."""
    bracketed = text.startswith("[") and text.endswith("]")
    bare = text[1:-1] if bracketed else text
    address, _, zone = bare.partition("%")
    if "%" in bare and not _ZONE.fullmatch(zone):
        return False
    try:
        version = ipaddress.ip_address(address).version
    except ValueError:
        return False
    return version == 6 or not (bracketed or "%" in bare)


def env_host(env: Mapping[str, str], name: str) -> str:
    """The host the launcher put in ``name``: a host name or an IPv4/IPv6 address (``[::1]`` too),
    or UsageError naming the variable."""
    text = env.get(name)
    if text is None:
        raise UsageError(f"{name} is not set; the launcher (torchrun, Slurm) sets it")
    if _is_address(text):
        return text
    labels = text.removesuffix(".").split(".")
    if (len(text) <= MAX_HOST_CHARS and all(_HOST_LABEL.fullmatch(label) for label in labels)
            and not labels[-1].isdigit() and not all(_INET_ATON_PART.fullmatch(label) for label in labels)):
        return text
    raise UsageError(f"{name}={shown(text)}: expected a host name or an IP address (where rank 0 listens)")
