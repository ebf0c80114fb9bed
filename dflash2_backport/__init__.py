"""Backport DFlash2 speculative decoding to vLLM 0.27.1, 0.27.0 and 0.26.0."""

from pathlib import Path as _Path

__version__ = "0.1.0"

# The wheel installs the edits and the vLLM modules here, as `transforms`
# and `modules`; a source checkout keeps them at the repository's top, beside
# this folder. There they are found as this package's too, so that a
# checkout on sys.path runs as the installed tool does.
_checkout = _Path(__file__).resolve().parent.parent
if not _Path(__file__).with_name("transforms").is_dir() and (
    _checkout / "transforms" / "__init__.py"
).is_file():
    __path__.append(str(_checkout))
