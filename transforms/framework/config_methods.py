"""A method of `VllmConfig` with its call in `__post_init__`, as the
refusals and the draft request cap judge them (vllm/config/vllm.py)."""

from __future__ import annotations

from .edit import Hunk, Judged, exactly_one
from .judging import is_call_of, method_before, statement_beside
from .source import Found, Source

CONFIG = "vllm/config/vllm.py"
CONFIG_CLASS = "VllmConfig"
#: The call the refusals' calls stand beside.
ANCHOR_CALL = "try_verify_and_update_config"


def config_parts(source: Source) -> tuple[Found, Found] | Judged:
    """`VllmConfig` and its `__post_init__`, or the drift of either."""
    cls = exactly_one(
        source.module.classes(CONFIG_CLASS), f"one module-level class {CONFIG_CLASS}"
    )
    if isinstance(cls, Judged):
        return cls
    post_init = exactly_one(cls.defs("__post_init__"), f"one method {CONFIG_CLASS}.__post_init__")
    return post_init if isinstance(post_init, Judged) else (cls, post_init)


def judge_refusal(
    source: Source,
    method: Hunk,
    name: str,
    anchor: str,
    call: Hunk,
    after: bool,
    earlier: tuple[str, ...] = (),
    anchor_call: str = ANCHOR_CALL,
) -> dict[str, Judged]:
    """A refusal's method right before `anchor`, and its call right before
    or `after` `self.<anchor_call>()`, by default
    `self.try_verify_and_update_config()`."""
    parts = config_parts(source)
    if isinstance(parts, Judged):
        return {method.name: parts, call.name: parts}
    cls, post_init = parts
    return {
        method.name: method_before(
            cls,
            method.after,
            anchor,
            expected=f"{CONFIG_CLASS}.{name} as the backport writes it",
            remedy="remove or rename it",
            earlier=earlier,
        ),
        call.name: statement_beside(
            post_init,
            lambda s: is_call_of(s, "self", anchor_call),
            f"`self.{anchor_call}()`",
            call.after,
            after=after,
        ),
    }
