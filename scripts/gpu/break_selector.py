"""Break DFlash2 on purpose in a copy of a patched vLLM: the selector's
candidate ids each swapped for a neighbour (the lowest bit flipped: 101 for
100), so that every draft walks wrong tokens while every id stays in the
vocabulary. `verify --gpu` on that copy must fail its judgement of the
drafts (verify_real_install.sh, step `broken`); greedy outputs stay
lossless, as speculative decoding keeps them whatever is drafted.

    python3 scripts/gpu/break_selector.py COPY/vllm
"""

from __future__ import annotations

import sys
from pathlib import Path

CALL = "return self.candidate_logits_processor.get_top_k_tokens("
BROKEN = "ids, scores = self.candidate_logits_processor.get_top_k_tokens("
RETURN = "        )\n\n\nEntryClass"


def main(package: Path) -> None:
    module = package / "model_executor" / "models" / "qwen3_dflash2.py"
    text = module.read_text()
    if text.count(CALL) != 1 or text.count(RETURN) != 1:
        raise SystemExit(f"{module}: not the module this script breaks")
    text = text.replace(CALL, BROKEN).replace(
        RETURN, "        )\n        return ids ^ 1, scores\n\n\nEntryClass")
    module.write_text(text)
    print(f"{module}: candidate ids flipped in their lowest bit")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
