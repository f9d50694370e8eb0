"""The one JSON Schema validator critpath checks its files with: the schema's number types as
harness.core.numbers reads them.

JSON Schema's ``integer`` is a number with no fractional part, so ``5.0`` passes it; YAML and
Python read ``5.0`` as a float, which then reaches ``range()`` or a world pin as a float (a
TypeError inside a rank, or a pin that passes on 2.0). Here an ``integer`` is an int and never a
bool or a float, and a ``number`` is an int or a finite float and never a bool: NaN compares false
with every ``minimum`` and ``maximum``, so a bound alone does not keep it out.
"""
from __future__ import annotations

import math

import jsonschema

from harness.core.echo import shown


def _is_integer(_checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(_checker, instance) -> bool:
    if isinstance(instance, bool):
        return False
    return isinstance(instance, int) or (isinstance(instance, float) and math.isfinite(instance))


def _why_not(instance, types: list) -> str:
    """Why ``instance`` is none of ``types``: for one number type, in harness.core.numbers' words."""
    if "number" in types and isinstance(instance, float):
        return f"{shown(instance)} is not a finite number"
    if types in (["integer"], ["number"]):
        return f"expected {'an integer' if types == ['integer'] else 'a number'}, got {shown(instance)}"
    return f"{instance!r} is not of type {', '.join(repr(t) for t in types)}"  # jsonschema's own wording


def _type(validator, types, instance, _schema):
    """The ``type`` keyword with an error that says what is wrong with a number."""
    types = [types] if isinstance(types, str) else list(types)
    if not any(validator.is_type(instance, t) for t in types):
        yield jsonschema.ValidationError(_why_not(instance, types))


_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, validators={"type": _type},
                                          type_checker=_TYPES)


def strict_validator(schema: dict):
    """A Draft 2020-12 validator of ``schema`` whose ``integer`` and ``number`` are critpath's."""
    return _Validator(schema)
