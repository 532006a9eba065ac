"""What bsa_timeline.py stamps a copy of a Gluon kernel's source with: the device-clock and SM-id
expressions, and edits that must match exactly once. Not run on its own; submissions/mla_decode/dev has
the same code (each kernel's scripts stand alone)."""
from __future__ import annotations

NOW = 'gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)'
SMID = 'gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)'


class SourceEdit:
    """A kernel's source, edited by replacing exact text. Each `old` must occur exactly once: a kernel
    whose lines differ fails with the line named, rather than being timed without its stamps."""

    def __init__(self, source: str, who: str):
        self.source = source
        self.who = who

    def __call__(self, old: str, new: str) -> None:
        if self.source.count(old) != 1:
            raise SystemExit(f"{self.who}: line not found once in the kernel: {old.strip()[:70]!r}")
        self.source = self.source.replace(old, new)
