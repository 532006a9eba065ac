"""Facts of the attention-kernel challenge shared by both sides (no ground truth here).

Case descriptors, the variant manifest and its matching rules, and the seed derivations,
exactly as the original (paradigmxyz/attention-kernel-challenge) defines them.
Worker side: imported by contract.py, the generator and task.py alike.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, fields

BLOCK_SIZE = 128
HEAD_DIM = 128
SCORE_SCALE = 1.0 / math.sqrt(HEAD_DIM)
MAX_VARIANT_COUNT = 16
FAMILIES = ("sliding_window", "sliding_window_global", "sliding_window_retrieval")
ROOT_SEED_ENV = "ATTENTION_KERNEL_CHALLENGE_PUBLIC_SUITE_ROOT_SEED"
SEED_MODULUS = 2**31 - 1


@dataclass(frozen=True)
class CaseSpec:
    """The original's case descriptor: what a submission's ``setup(suite_specs, ...)`` sees."""

    case_id: str
    family: str
    batch_size: int
    num_heads: int
    t_max: int
    window_blocks: int
    global_blocks: int = 0
    retrieval_blocks: int = 0
    retrieval_local_bias: float = 0.7
    seq_len_min_ratio: float = 0.625
    seed: int = 0
    profile: str = "smoke"


SPEC_KEYS = tuple(f.name for f in fields(CaseSpec) if f.name not in ("case_id", "profile"))


def validate_spec(spec: CaseSpec) -> None:
    """The original's case checks, as ValueError."""
    if spec.family not in FAMILIES:
        raise ValueError(f"unsupported family {spec.family!r} in case {spec.case_id!r}")
    if spec.batch_size < 1 or spec.num_heads < 1:
        raise ValueError(f"case {spec.case_id!r} must have positive batch_size and num_heads")
    if spec.t_max < BLOCK_SIZE or spec.t_max % BLOCK_SIZE:
        raise ValueError(f"case {spec.case_id!r}: t_max must be a positive multiple of {BLOCK_SIZE}")
    if spec.window_blocks < 1:
        raise ValueError(f"case {spec.case_id!r}: window_blocks must be >= 1")
    if spec.global_blocks < 0 or spec.retrieval_blocks < 0:
        raise ValueError(f"case {spec.case_id!r}: negative global/retrieval blocks")
    if not 0.0 <= spec.retrieval_local_bias <= 1.0:
        raise ValueError(f"case {spec.case_id!r}: retrieval_local_bias must be in [0, 1]")
    if not 0.0 < spec.seq_len_min_ratio <= 1.0:
        raise ValueError(f"case {spec.case_id!r}: seq_len_min_ratio must be in (0, 1]")


def spec_from_case(case, name: str | None = None) -> CaseSpec:
    """A CaseSpec from a kbench case (a dict of the case's keys, or an object with ``params``)."""
    params = dict(getattr(case, "params", case))
    name = name or getattr(case, "name", None) or params.get("case_id") or params.get("name") or "case"
    kwargs = {k: params[k] for k in SPEC_KEYS if k in params}
    spec = CaseSpec(case_id=str(name), **kwargs)
    validate_spec(spec)
    return spec


# -- seeds -------------------------------------------------------------------------------
def _digest_seed(payload: str) -> int:
    digest = hashlib.sha256(payload.encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_MODULUS


def root_seed(suite: str, env: dict | None = None) -> int:
    """The public suites' root: ``$ATTENTION_KERNEL_CHALLENGE_PUBLIC_SUITE_ROOT_SEED`` or
    ``"local-public-sample:{suite}"``; int() when it parses, else sha256 (first 8 bytes, big
    endian) mod 2**31 - 1."""
    env = os.environ if env is None else env
    payload = env.get(ROOT_SEED_ENV)
    if payload is None:
        payload = f"local-public-sample:{suite}"
    try:
        return int(payload)
    except ValueError:
        return _digest_seed(payload)


def public_case_seed(root: int, suite: str, case_id: str) -> int:
    """A public-suite case's seed: sha256(f"{root}:{suite}:{case_id}")."""
    return _digest_seed(f"{root}:{suite}:{case_id}")


def derived_seed(base_seed: int, salt: str) -> int:
    """The original evaluator's per-call seeds: sha256(f"{base_seed}:{salt}")."""
    return _digest_seed(f"{base_seed}:{salt}")


# -- warm-up descriptors -------------------------------------------------------------------
def shape_key(spec: CaseSpec) -> tuple:
    """The original's warm-up key: one canonical warm-up per distinct key."""
    return (spec.family, spec.batch_size, spec.num_heads, spec.t_max, spec.window_blocks,
            spec.global_blocks, spec.retrieval_blocks)


def canonical_descriptors(specs) -> list[CaseSpec]:
    """What ``setup(suite_specs, ...)`` receives: one canonical case per shape key
    (full length, bias 0.5 for retrieval else 0.0, seed 0), never the real cases."""
    out, seen = [], set()
    for spec in specs:
        key = shape_key(spec)
        if key in seen:
            continue
        seen.add(key)
        out.append(CaseSpec(
            case_id=f"warmup-key-{len(out) + 1}", family=spec.family,
            batch_size=spec.batch_size, num_heads=spec.num_heads, t_max=spec.t_max,
            window_blocks=spec.window_blocks, global_blocks=spec.global_blocks,
            retrieval_blocks=spec.retrieval_blocks,
            retrieval_local_bias=0.5 if spec.family == "sliding_window_retrieval" else 0.0,
            seq_len_min_ratio=1.0, seed=0, profile="setup"))
    return out


# -- variant manifest ----------------------------------------------------------------------
_RANGES = {  # field -> (default min, default max, type)
    "t_max": (0, 1 << 30, int),
    "batch_heads": (0, 1 << 30, int),
    "batch_size": (0, 1 << 30, int),
    "num_heads": (0, 1 << 30, int),
    "window_blocks": (0, 1 << 30, int),
    "global_blocks": (0, 1 << 30, int),
    "retrieval_blocks": (0, 1 << 30, int),
    "retrieval_local_bias": (0.0, 1.0, float),
}


@dataclass(frozen=True)
class VariantSpec:
    name: str
    families: tuple = ()
    bounds: tuple = ()  # ((field, min, max), ...) in _RANGES order

    def __getattr__(self, attr):  # min_t_max, max_window_blocks, ... as in the original
        for prefix, pos in (("min_", 1), ("max_", 2)):
            if attr.startswith(prefix):
                for row in object.__getattribute__(self, "bounds"):
                    if row[0] == attr[len(prefix):]:
                        return row[pos]
        raise AttributeError(attr)

    def matches(self, spec: CaseSpec) -> bool:
        if self.families and spec.family not in self.families:
            return False
        values = {"batch_heads": spec.batch_size * spec.num_heads}
        for name, lo, hi in self.bounds:
            value = values.get(name, getattr(spec, name, None))
            if not lo <= value <= hi:
                return False
        return True


def parse_manifest(payload) -> tuple[VariantSpec, ...]:
    """``VARIANT_MANIFEST`` -> variants; ValueError/TypeError with the original's rules."""
    if payload is None:
        raise ValueError("submission.py must define VARIANT_MANIFEST with at least one declared variant")
    if not isinstance(payload, (list, tuple)):
        raise TypeError("VARIANT_MANIFEST must be a list or tuple")
    if not payload:
        raise ValueError("VARIANT_MANIFEST must declare at least one variant")
    if len(payload) > MAX_VARIANT_COUNT:
        raise ValueError(f"VARIANT_MANIFEST is too large: {len(payload)} > {MAX_VARIANT_COUNT}")
    variants = tuple(_parse_variant(item) for item in payload)
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError("VARIANT_MANIFEST variant names must be unique")
    return variants


def _parse_variant(item) -> VariantSpec:
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, dict):
        raise TypeError("each VARIANT_MANIFEST entry must be a string name or a dict")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("each VARIANT_MANIFEST dict must have a non-empty string 'name'")
    families = item.get("families", ())
    if not isinstance(families, (list, tuple)):
        raise TypeError(f"variant {name!r}: 'families' must be a list or tuple")
    for family in families:
        if family not in FAMILIES:
            raise ValueError(f"variant {name!r}: unsupported family {family!r}")
    bounds = []
    for field_name, (lo_default, hi_default, cast) in _RANGES.items():
        has_min, has_max = f"min_{field_name}" in item, f"max_{field_name}" in item
        if field_name in item:
            if has_min or has_max:
                raise ValueError(f"variant {name!r}: {field_name!r} may use either an exact value "
                                 "or min/max bounds, not both")
            lo = hi = cast(item[field_name])
        else:
            lo = cast(item.get(f"min_{field_name}", lo_default))
            hi = cast(item.get(f"max_{field_name}", hi_default))
            if lo > hi:
                raise ValueError(f"variant {name!r}: min_{field_name}={lo} > max_{field_name}={hi}")
        bounds.append((field_name, lo, hi))
    return VariantSpec(name, tuple(families), tuple(bounds))


def match_variant(spec: CaseSpec, variants) -> VariantSpec:
    """The one variant matching ``spec``; ValueError when none or several match."""
    matches = [v for v in variants if v.matches(spec)]
    if not matches:
        raise ValueError(f"no declared variant matches case {spec.case_id!r}: add a catch-all "
                         "variant or widen VARIANT_MANIFEST")
    if len(matches) > 1:
        raise ValueError(f"several declared variants match case {spec.case_id!r}: "
                         f"{', '.join(v.name for v in matches)}; variant rules must be unambiguous")
    return matches[0]
