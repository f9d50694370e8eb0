"""The integers a launcher (torchrun, Slurm) puts in a process's environment, read by the one number
grammar (harness.core.numbers) within each variable's range: a launcher's typo is one line naming
the variable (exit 2), not a traceback from inside torch.distributed, and '٣', '+1', ' 1' or '01'
is no rank."""
from __future__ import annotations

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
